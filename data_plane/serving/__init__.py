"""One request's orchestration in the HTTP door (docs/data_plane.md, "Code map"): handlers,
middleware, the attempt walk and delivery. It may import `flow` (the queue its handlers hold
requests in), `progress`, `decision_step`, `resilience`, `upstream`, `decision`, `request`,
`telemetry` and the lowest floor (`domain`, `settings`, ...); never `sync` (a contract),
`checks` (it offers answers to them through `proxy.AnswerCheck`), `gateway` or the
composition roots."""
