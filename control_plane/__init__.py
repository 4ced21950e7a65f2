"""Gearbox control plane: validates profiles, builds routing tables and publishes them to Redis.

Pure core (`build/`, the table build; `loop/`, what the closed loop decides) with adapters around
it (`store/` in Redis, `runtime/`, the admin API in `api/`, the operator page in `ui/`, the CLI).
Its floors: docs/control_plane.md "Code map". It never imports `data_plane` or `profiler`.
"""
