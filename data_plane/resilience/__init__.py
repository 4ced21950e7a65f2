"""Breakers, retries and load per endpoint and tenant (docs/reliability.md): what the engines
and tenants have lately shown, read by the decision as its health view. It may import
`decision`, `request`, `telemetry` and the lowest floor (`domain`, `settings`, ...); never
`upstream` (its sibling) or a floor above."""
