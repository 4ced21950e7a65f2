"""Hostile-tenant scenarios (issue 22): one client's ordinary traffic, or an engine slower than
profiled, must not move fleet-wide state; a truly broken engine still must."""
