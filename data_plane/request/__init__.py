"""PURE: reading one request (docs/data_plane.md, "Code map"): its body, budget headers,
identity, priority, category and prompt size, each error naming its field; no clock, no I/O. It
may import `decision`, `telemetry` and the lowest floor (`domain`, `settings`, ...); never
aiohttp, redis or a floor above."""
