"""Flow control's queue (docs/data_plane.md, "Flow control"): `queue.FlowQueue` holds a request
every pair of its fleet is full for, inside its budget, in both doors (the HTTP door's handlers
and gateway mode's held ext_proc streams), and has the decision step decide it again when a
pair may have room. The judgement it re-runs is pure and stays on the decision floor
(`decision.admission`, `decision.saturation`, `decision.capacity`, `decision.fair_share`, under
the decision core's no-I/O contract), fed by per-tenant state on the resilience floor
(`resilience.tenant_load`, `resilience.output_length`) and handed over by `decision_step`
(`asked.Full`); the queue's metrics are `telemetry.flow_metrics`. It may import
`decision_step`, `resilience`, `decision`, `request`, `telemetry` and the lowest floor
(`asked`, `domain`, `errors`, `settings`, ...); never `sync` (a contract), `progress`,
`serving`, `gateway`, `checks` or the composition roots."""
