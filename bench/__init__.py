"""Gearbox benchmarks: proxy overhead, decision speed, routing quality, memory and soak.

Run with `python -m bench all` (or `make bench`); every figure in `bench/RESULTS.md` is
measured by that run, side by side with its baseline. Nothing here is imported by the planes.
"""
