# engram: `make run` serves the embedded default store (./.engram) over HTTP; `make test` runs every check CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench clean system-deps screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[server,mcp]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

run: $(VENV)/.installed
	$(BIN)/engram serve

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy --strict src/

# What the tests drive besides Python: Debian's chromium (web UI, issue #16), prometheus/promtool and
# prometheus-alertmanager/amtool (issue #15).
system-deps:
	@command -v chromium >/dev/null && command -v promtool >/dev/null && command -v amtool >/dev/null || { \
	  echo "installing Debian packages chromium, prometheus and prometheus-alertmanager (needed by the tests)"; \
	  apt-get install -y -q chromium prometheus prometheus-alertmanager >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null && apt-get install -y -q chromium prometheus prometheus-alertmanager >/dev/null; }; }

test: lint system-deps
	$(BIN)/pytest

# docs/ui/*.png: every view of the web UI at 1400x900 and 390x844, drawn by headless Chromium.
screenshots: $(VENV)/.installed-dev system-deps
	PYTHONPATH=tests $(BIN)/python -m ui.screenshots docs/ui

bench: $(VENV)/.installed-dev
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python benchmarks/bench_core.py

clean:
	rm -rf $(VENV) .engram .cache/langgraph-sdists
