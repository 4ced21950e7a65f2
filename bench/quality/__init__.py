"""Section 3 (`python -m bench quality`): routing quality on a simulated fleet profiled by the
profiler, replayed open loop at 1x, 2x and 3x its nominal rate."""
