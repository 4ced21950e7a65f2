"""One request's orchestration in the HTTP door (docs/data_plane.md, "Code map"): handlers,
middleware, the flow-control queue, the attempt walk and delivery. It may import `progress`,
`decision_step`, `resilience`, `upstream`, `decision`, `request`, `telemetry` and the lowest
floor (`domain`, `settings`, ...); never `sync` (a contract), `checks` (it offers answers to
them through `proxy.AnswerCheck`), `gateway` or the composition roots."""
