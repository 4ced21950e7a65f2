"""PURE: the table build (reports + policy -> RoutingTable) and the documents it reads."""
