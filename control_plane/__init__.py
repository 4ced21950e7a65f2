"""Gearbox control plane: validates profiles, builds routing tables and publishes them to Redis.

Pure core (`fitting`, `pricing`, `precision`, `scoring`, `table`) with adapters around it (Redis
stores, the admin API, the CLI). It never imports `data_plane` or `profiler`.
"""
