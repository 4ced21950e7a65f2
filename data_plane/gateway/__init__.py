"""Gearbox as an Envoy external processor (ext_proc): the routing core as the model-variant
step of a Gateway API inference gateway (docs/gateway.md).
It may import `serving`, `flow` (the HTTP door's queue holds its requests too), `progress`,
`sync` and every floor below; only the composition roots may import it."""
