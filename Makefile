# Two commands are the whole quick start: `make demo` and `make test`.
# Each creates .venv at the repository root and installs everything it needs.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS := torch,jax,peers,docs,dev

.PHONY: demo test venv lint schemas conformance conformance-regenerate bench bench-quick fuzz docs clean

# constraints.txt pins the exact versions CI needs (torch's CPU build on disk, the JAX stack the frozen
# conformance cases were made with, the linters); pyproject.toml keeps ranges for users.
$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[$(EXTRAS)]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m opencheckpoint.demo

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

schemas: $(STAMP)
	$(VENV)/bin/opencheckpoint schema export schemas/v1

# The suite against the reference CLI and the independent reader, as real subprocesses.
conformance: $(STAMP)
	$(VENV)/bin/opencheckpoint conformance run --reader "$(VENV)/bin/opencheckpoint conformance impl" \
	    --writer "$(VENV)/bin/opencheckpoint conformance impl" --known-failures conformance/known-failures.json
	$(VENV)/bin/opencheckpoint conformance run --reader conformance/independent_reader/run

# Rebuild every golden case (must be byte-identical for a released version).
conformance-regenerate: $(STAMP)
	$(PY) conformance/generate.py

bench: $(STAMP)
	$(PY) benchmarks/run.py --size-gib 1 --plot docs/img/benchmarks.png

bench-quick: $(STAMP)
	$(PY) benchmarks/run.py --size-gib 0.25 --quick

# A bounded fuzzing campaign over mutated conformance cases (reader must only raise CheckpointError).
FUZZ_SECONDS ?= 600
FUZZ_SEED ?= 0
fuzz: $(STAMP)
	$(PY) fuzz/fuzz_reader.py --seconds $(FUZZ_SECONDS) --jobs 2 --seed $(FUZZ_SEED)

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) site build *.egg-info reference_impl/*.egg-info
