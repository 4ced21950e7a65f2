"""Wire contracts shared by the planes: ProfileReport, RoutingTable, Policy, Redis key names.

The only package imported by more than one plane; it imports none of them.
"""
