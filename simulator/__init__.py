"""A vLLM-compatible engine simulator: many simulated (model, quantization) pairs in one process.

Same OpenAI routes with real SSE, `/health`, `/v1/models`, vLLM-named `/metrics`; a latency model
with queueing; failure injection; seeded known answers. Imports only `contracts`. See
docs/simulator.md.
"""

from simulator.config import FaultConfig, SimFleetConfig, SimPairConfig, load_fleet
from simulator.engine import PairStats
from simulator.fleet import Fleet, run_fleet

__all__ = [
    "FaultConfig",
    "Fleet",
    "PairStats",
    "SimFleetConfig",
    "SimPairConfig",
    "load_fleet",
    "run_fleet",
]
