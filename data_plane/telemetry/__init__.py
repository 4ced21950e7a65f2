"""Metrics, spans and logs (docs/METRICS.md, docs/data_plane.md "Code map"): what the data plane
counts and traces, and how it exports them. It may import `decision`, `request` and the lowest
floor (`domain`, `settings`, ...); never a floor above."""
