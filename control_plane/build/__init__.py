"""PURE: the table build (reports + policy -> RoutingTable) and the documents it reads.
It may import only `settings` (and `contracts`); every floor above may import it."""
