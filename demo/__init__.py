"""Gearbox demo orchestrator: `python -m demo real` (vLLM CPU engines) or `python -m demo sim`.

Runs every part as its own command (engines, redis-server, control plane, profiler, data plane)
and reports what routing did with a mixed workload. It owns no routing logic.
"""
