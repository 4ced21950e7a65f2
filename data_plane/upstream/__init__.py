"""The transport to engines and collectors (docs/data_plane.md, "Code map"): the
`UpstreamClient` port and its aiohttp and HTTP/1 implementations. It may import `decision`,
`request`, `telemetry` and the lowest floor (`domain`, `settings`, ...); never `resilience` (its
sibling) or a floor above."""
