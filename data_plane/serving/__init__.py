"""One request's orchestration in the HTTP door (docs/data_plane.md, "Code map"): handlers,
middleware, the flow-control queue, the attempt walk, delivery and the live checks. It may
import `progress`, `decision_step`, `resilience`, `upstream`, `decision`, `request`, `telemetry`
and the lowest floor (`domain`, `settings`, ...); never `sync` (a contract), `gateway` or the
composition roots."""
