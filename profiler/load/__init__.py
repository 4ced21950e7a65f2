"""Load measurement: the sweep's workloads and arrival schedules, the runner that times every
request, and the rule that stops profiling a dead engine. It may import `engine`, `evals` and
the lowest floor; never `reports` (its sibling) or `run`."""
