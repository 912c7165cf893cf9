# Two commands are the whole quick start: `make demo` and `make test`.
# Each creates .venv at the repository root and installs everything it needs.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS := torch,jax,peers,docs,dev,remote,lightning,hf

.PHONY: demo test test-long venv lint schemas conformance conformance-regenerate bench bench-quick fuzz docs clean \
	ts-build ts-test ts-conformance ts-browser-test ts-browser-test-big chromium

# constraints.txt pins the exact versions CI needs (torch's CPU build on disk, the JAX stack the frozen
# conformance cases were made with, the linters); pyproject.toml keeps ranges for users.
# setup.py builds the one compiled module (opencheckpoint/tree/_ctree.c, decision 0025) in place; it is optional,
# so a machine without a C compiler still installs. Under make the tests require it (OPENCHECKPOINT_REQUIRE_COMPILED:
# tests/perf/test_compiled_tree.py fails instead of the suite silently running the pure-Python fallback).
export OPENCHECKPOINT_REQUIRE_COMPILED ?= 1
$(STAMP): pyproject.toml constraints.txt setup.py $(wildcard reference_impl/opencheckpoint/tree/_c*.[ch])
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[$(EXTRAS)]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory ts-build; \
	else echo "note: node/npm not found; the TypeScript implementation and the viewer are not built"; fi
	$(PY) -m opencheckpoint.examples.demo

# The suite spread over the cores (pytest-xdist; TEST_WORKERS=0 runs it in one process), with the TypeScript
# suites (build, unit tests, conformance, browser) running beside it: they fill the minutes when one pytest
# worker is left alone with a long group; their output is printed after pytest's. The 15 slowest tests and the
# wall time are printed at the end (the test budget: docs/development.md). Long campaigns (tests marked `long`)
# are skipped here and run by `make test-long`, which a release's CI runs.
TEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
# The suite starts hundreds of interpreters (CLI runs, ranks, doc pages, the independent reader once per case);
# with PYTHONDONTWRITEBYTECODE set (as on CI) each one would compile every module it imports from source, since
# an editable install, unlike a wheel's, is not byte-compiled. Compiled once here instead (only what changed;
# interpreters read these files whatever that variable says): decision 0023, "Bytecode".
BYTECODE_DIRS := reference_impl/opencheckpoint conformance/independent_reader tests benchmarks docs/scripts fuzz

test: $(STAMP)
	@start=$$(date +%s); ts_log=$$(mktemp); \
	$(PY) -m compileall -q -j 0 $(BYTECODE_DIRS) >/dev/null || exit 1; \
	$(MAKE) --no-print-directory ts-test >$$ts_log 2>&1 & ts_pid=$$!; \
	rc=0; $(PYTEST) --durations=15 || rc=$$?; \
	ts_rc=0; wait $$ts_pid || ts_rc=$$?; \
	echo "--- TypeScript suites (ran beside pytest): exit $$ts_rc ---"; cat $$ts_log; rm -f $$ts_log; \
	if [ $$rc -eq 0 ]; then rc=$$ts_rc; fi; \
	echo "make test: $$(( $$(date +%s) - start )) s wall, exit $$rc"; exit $$rc

test-long: $(STAMP)
	$(PYTEST) --long -m long

# --- TypeScript implementation and browser viewer (reference_impl/typescript) ---
# `npm ci` only when the lockfile changed, the build only when a source changed.
TS := reference_impl/typescript
TS_MODULES := $(TS)/node_modules/.package-lock.json
TS_BUILT := $(TS)/dist/.built
TS_SOURCES := $(shell find $(TS)/src $(TS)/scripts -type f 2>/dev/null) $(TS)/tsconfig.json $(TS)/package.json

$(TS_MODULES): $(TS)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "need node >= 20 and npm on PATH"; exit 1; }
	cd $(TS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(TS_BUILT): $(TS_MODULES) $(TS_SOURCES)
	cd $(TS) && npm run --silent build
	touch $@

# Builds dist/ (Node library and bin/conformance) and docs/viewer-app/viewer.js (the viewer bundle).
ts-build: $(TS_BUILT)

# Debian's chromium for the headless browser test (installed when missing; needs root).
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Unit tests, the whole conformance suite as reader and writer, the viewer in headless Chromium.
ts-test: $(STAMP) ts-build chromium
	cd $(TS) && node --test test/*.test.mjs
	$(MAKE) --no-print-directory ts-conformance ts-browser-test

ts-conformance: $(STAMP) ts-build
	$(VENV)/bin/opencheckpoint conformance run --reader $(TS)/bin/conformance --writer $(TS)/bin/conformance --quiet

ts-browser-test: $(STAMP) ts-build chromium
	cd $(TS) && OC_PYTHON=$(abspath $(PY)) node --test test-browser/*.test.mjs

# The viewer on a 1 GiB archive (OC_VIEWER_BIG_MIB=N for another size): every viewer promise at that size and
# the renderer's memory against a 16 MiB archive (docs/viewer.md). Minutes and 1 GiB of disk: not part of `make test`.
ts-browser-test-big: $(STAMP) ts-build chromium
	cd $(TS) && OC_PYTHON=$(abspath $(PY)) node --test --test-timeout=1800000 test-browser/big/*.test.mjs

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

schemas: $(STAMP)
	$(VENV)/bin/opencheckpoint schema export --overwrite schemas/v1
	$(VENV)/bin/opencheckpoint schema export --overwrite --format-version 2 schemas/v2

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
	$(PY) benchmarks/sharded.py --size-mib 256 --ranks 1 2 4
	$(PY) benchmarks/jax_sharded.py --size-mib 512

bench-quick: $(STAMP)
	$(PY) benchmarks/run.py --size-gib 0.25 --quick

# A bounded fuzzing campaign over mutated conformance cases (reader must only raise CheckpointError).
FUZZ_SECONDS ?= 600
FUZZ_SEED ?= 0
fuzz: $(STAMP)
	$(PY) fuzz/fuzz_reader.py --seconds $(FUZZ_SECONDS) --jobs 2 --seed $(FUZZ_SEED)

docs: $(STAMP)
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory ts-build; fi
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) site build *.egg-info reference_impl/*.egg-info $(TS)/node_modules $(TS)/dist docs/viewer-app/viewer.js
