"""PURE: the routing decision (docs/data_plane.md, "Code map"): a compiled table, a request's
facts and a health view in, a route or a reasoned refusal out; no clock, no I/O, no logging. It
may import `request`, `telemetry` and the lowest floor (`domain`, `settings`, ...); never
aiohttp, redis or a floor above."""
