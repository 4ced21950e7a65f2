"""Gearbox profiler: measures (model, quantization) pairs and writes ProfileReports.

Imports only `contracts` and its own modules; never the planes or the simulator.
"""

PROFILER_VERSION = "0.1.0"
