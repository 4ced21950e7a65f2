"""Reliability suite: faults under load with real Redis, real processes and simulated engines."""
