"""The scale section (`python -m bench scale`, docs/benchmarks.md "Scale"): what the data
plane's shared state costs per replica as the fleet grows, `choose_route` and the table build
on large fleets, and the upstream client's memory under a hostile engine."""
