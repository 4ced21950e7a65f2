"""The live checks (docs/accuracy.md "Live checks", "Canary items"; docs/control_plane.md
"Latency feedback"): evidence about the pairs gathered in the background, off every client's
path. `accuracy_check` re-asks a sampled answer on the reference pair after the client has it,
`canary_items` sends held-out items with known answers, `latency_probe` measures pairs a refit
made slower; their pure parts are `agreement` (does an answer give the reference's),
`reask` (the request a check sends) and `check_sampling` (which answers become checks), which
do no I/O (a contract). It may import `serving` (the attempt runner and `usage`), `decision`,
`resilience`, `upstream`, `telemetry` and the lowest floor (`domain`, `settings`, ...); never
`sync` (a contract), `progress`, `gateway` or the composition roots. `serving` offers answers to
the checks through its own `lifecycle.AnswerCheck` protocol, when a door finishes a served
request (`lifecycle.Finish`), and never imports this package."""
