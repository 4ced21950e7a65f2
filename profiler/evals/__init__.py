"""Accuracy and eval sets: parsing and scoring eval items, the generated and held-out sets,
how much data a routing decision needs, and the traffic mix that orders it. PURE but the
set generator's `write_all`. It may import only the lowest floor (`errors`, `stats`)."""
