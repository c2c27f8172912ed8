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
PACKAGE_DIRS := package contracts validators steps engine adapters
MODULES := $(VENV)/.modules

.PHONY: all test demo bench lint typecheck format schemas conformance install clean

all: test

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(PY)
	@find $(PACKAGE_DIRS) -type f \( -name '*.py' -o -name 'py.typed' -o -name '*.toml' \) | sort > $(MODULES).want
	@md5sum pyproject.toml >> $(MODULES).want
	@if ! cmp -s $(MODULES).want $(MODULES); then \
		echo "installing aptix-pipeline (strict editable) into $(VENV)"; \
		$(BIN)/pip install --quiet -e '.[test]' --config-settings editable_mode=strict \
			&& mv $(MODULES).want $(MODULES); \
	else rm -f $(MODULES).want; fi

test: install
	$(BIN)/pytest
	$(BIN)/mypy -p aptix_pipeline
	$(BIN)/mypy tests bench examples
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

demo: install
	$(PY) examples/demo.py

bench: install
	$(PY) bench/run.py

schemas: install
	$(PY) -m aptix_pipeline.contracts.schemas docs/schemas

conformance: install
	$(PY) tests/conformance.py --write

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
