# Gearbox — two commands matter: `make demo` and `make test`. Both set everything up themselves.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
PYTEST_ARGS ?=
# `make test` runs pytest on this many xdist workers (0: one process, no xdist). The suite
# mostly waits on loopback servers and child processes (CI's pytest used about 10% of a core),
# so workers overlap the waits; how they share the work: docs/style.md, "Tests".
PYTEST_WORKERS ?= 6

.PHONY: help venv system-deps lint test pytest test-fast demo demo-cp demo-sim bench bench-quick bench-gate soak engines calibrate clean

help:
	@echo "make demo      - the main job end to end (see README)"
	@echo "make test      - install everything, lint, type-check, run all tests"
	@echo "make demo-sim  - the same flow on the engine simulator"
	@echo "make bench     - benchmarks, written to bench/RESULTS.md"
	@echo "make bench-gate - CI's overhead gate (after make test in .ci/run)"

$(STAMP): pyproject.toml
	@echo "==> creating $(VENV) and installing gearbox[dev]"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/pip install -q --disable-pip-version-check --upgrade pip
	@$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

system-deps:  # nginx: the load balancer in front of data-plane replicas in tests/integration
	@bash infra/scripts/ensure-system-deps.sh chromium nginx

bench-deps:
	@bash infra/scripts/ensure-system-deps.sh nginx wrk

lint: venv
	@echo "==> ruff"
	@$(BIN)/ruff check .
	@$(BIN)/ruff format --check .
	@echo "==> import contracts"
	@$(BIN)/lint-imports
	@echo "==> mypy --strict"
	@$(BIN)/mypy contracts control_plane data_plane profiler simulator demo tests bench infra/k8s/sync_embedded.py
	@$(BIN)/mypy infra/engines

# Lint and pytest start together: mypy --strict on a fresh clone (no .mypy_cache) is CPU work
# for minutes on a loaded machine, and the pytest run mostly waits on loopback servers, so the
# two overlap. Lint's report is printed after pytest's; `make test` fails if either fails.
test: venv system-deps
	@echo "==> lint (ruff, import contracts, mypy --strict) beside pytest: its report follows pytest's"
	@log=$$(mktemp); $(MAKE) --no-print-directory lint > $$log 2>&1 & lint=$$!; \
	  $(MAKE) --no-print-directory pytest; rc=$$?; \
	  wait $$lint; lint_rc=$$?; cat $$log; rm -f $$log; \
	  if [ $$lint_rc -ne 0 ]; then echo "lint failed (exit $$lint_rc)" >&2; exit $$lint_rc; fi; \
	  exit $$rc

# The whole suite in one pass on the workers; the groups of tests/conftest.py GROUPS (the
# latency verdicts, the fault tests, the real engines, the wheel) each run on one worker.
# Every worker collects the whole suite. One process collects it first with bytecode writing
# on (this machine sets PYTHONDONTWRITEBYTECODE): the workers then read pytest's rewritten test
# modules and the product's bytecode from __pycache__ (gitignored) instead of each compiling
# them again. Six workers collecting a fresh clone: 95 and 100 CPU-s; after the warm-up 55 and
# 53, plus 14 and 17 for the warm-up itself (docs/style.md, "Tests"). Its failures are the
# workers' to report.
pytest: venv
	@echo "==> pytest ($(PYTEST_WORKERS) workers)"
	@if [ "$(PYTEST_WORKERS)" != 0 ]; then \
	  env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest --collect-only -q -p no:xdist \
	    -p no:cacheprovider $(PYTEST_ARGS) > /dev/null 2>&1 || true; fi
	@$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS); \
	  rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests (exit 5): failing" >&2; exit 1; fi; \
	  exit $$rc

test-fast: venv
	@$(BIN)/python -m pytest -m "not engine" $(PYTEST_ARGS)

# The real thing: engines built from nothing (cached under ~/.cache/gearbox), profiled, routed.
demo: venv system-deps
	@$(BIN)/python -m demo real $(DEMO_ARGS)

# The same flow on the engine simulator, at larger fleet scale, in a minute or two.
demo-sim: venv system-deps
	@$(BIN)/python -m demo sim $(DEMO_ARGS)

# The control plane alone on the sample profiles (the README tour).
demo-cp: venv system-deps
	@$(BIN)/python -m demo.control_plane_tour

# Real vLLM CPU engines: venvs, converted and quantized checkpoints (idempotent).
engines:
	@python3 infra/engines/engines.py setup

bench: venv system-deps bench-deps
	@$(BIN)/python -m bench all $(BENCH_ARGS)

bench-quick: venv system-deps bench-deps
	@$(BIN)/python -m bench all --quick $(BENCH_ARGS)

# CI's overhead gate (.ci/run, after `make test`): Gearbox against the minimal proxy, side by
# side on one core; exit 1 below its threshold (docs/benchmarks.md, "The CI overhead gate").
bench-gate: venv system-deps bench-deps
	@$(BIN)/python -m bench.overhead.gate

soak: venv system-deps bench-deps
	@$(BIN)/python -m bench soak $(BENCH_ARGS)

# The built-in category model data planes use for tables that carry no classifier.
calibrate: venv
	@$(BIN)/python -m control_plane.build.category_training --out data_plane/request/category_model.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build *.egg-info
