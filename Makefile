# cdml-edge: the two commands are `make demo` (the appliance only) and `make test` (everything).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
APP_STAMP := $(VENV)/.installed-app
TORCH  := torch==2.13.0

.PHONY: install install-dev test test-fast lint docs bench fuzz demo clean lock test-matrix \
        test-lowest dist test-arm64

NATIVE := $(wildcard cdml_edge/archive/_native/*.c cdml_edge/archive/_native/*.h \
            cdml_edge/archive/_native/cffi_build.py cdml_edge/decode/_native/*.c \
            cdml_edge/decode/_native/*.h cdml_edge/decode/_native/cffi_area.py)

# The appliance alone (what `make demo` needs): the core install, no torch, no extras.
# Re-installing when the C sources change rebuilds the native reader and the decoders' C
# helpers in place.
$(APP_STAMP): pyproject.toml setup.py $(NATIVE)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel cffi
	$(PIP) install -q -e .
	@$(PY) -c "from cdml_edge.archive.native import describe; print('archive reader:', describe())"
	@touch $(APP_STAMP)

# Everything the tests, the linters and the training side need: PyTorch first (the CPU
# build), then the train, s3, ray and dev extras.
$(STAMP): pyproject.toml setup.py $(NATIVE)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel cffi
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[train,s3,ray,dev]'
	@$(PY) -c "from cdml_edge.archive.native import describe; print('archive reader:', describe())"
	@touch $(STAMP) $(APP_STAMP)

install: $(APP_STAMP)

install-dev: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -ra -n 2 --dist loadgroup

test-fast: $(STAMP)
	$(PY) -m pytest -q -ra -m "not slow" -n 2 --dist loadgroup

lint: $(STAMP)
	$(VENV)/bin/ruff check cdml_edge tests scripts
	$(VENV)/bin/ruff format --check cdml_edge tests scripts
	$(VENV)/bin/mypy
	$(PY) scripts/checks/check_layers.py
	$(PY) scripts/checks/check_function_length.py
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -q -d build/site

# The documentation site on http://127.0.0.1:8000 (docs/ and mkdocs.yml).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

bench: $(STAMP)
	@set -e; for s in scripts/bench/bench_*.py; do echo "== $$s"; $(PY) $$s; done

fuzz: $(STAMP)
	$(PY) scripts/checks/fuzz_archive.py --seconds 300

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The runtime lock, per board Python and architecture (uv pip compile --generate-hashes).
lock: $(STAMP)
	$(PY) scripts/release/lock.py

# Each board Python found here: wheel, fresh venv from the lock (no torch), a real agent + scan.
test-matrix: $(STAMP)
	$(PY) scripts/release/test_matrix.py

# A Pi's userland (Debian bookworm arm64 under qemu-user-static; root needed, the root is
# cached): the wheel built from the sdist there, the runtime from the aarch64 lock, the board
# smoke and the C-vs-Python archive tests, each step timed. The aarch64 wheel lands in dist/.
test-arm64: $(STAMP)
	@rc=0; $(PY) scripts/release/test_arm64.py --wheel-out dist || rc=$$?; \
	  if [ $$rc = 77 ]; then exit 0; else exit $$rc; fi  # 77: SKIPPED, the reason printed

# The lowest direct versions pyproject.toml allows, on Python 3.10: the appliance tests.
test-lowest: $(STAMP)
	$(PY) scripts/release/check_lowest.py

# The release: sdist (C sources, lock, units) and wheels in dist/, checked against CHANGELOG.md:
# this machine's wheel, and (as root, in the cached arm64 root) the aarch64 one, built from
# the sdist by the arm64 gcc and repaired by auditwheel (libzstd inside).
dist: $(STAMP)
	rm -rf dist
	$(PY) -m uv build --sdist --wheel --out-dir dist
	@rc=0; $(PY) scripts/release/test_arm64.py --wheel-only --wheel-out dist || rc=$$?; \
	  if [ $$rc = 77 ]; then echo "dist: no aarch64 wheel (SKIPPED above)"; \
	  elif [ $$rc != 0 ]; then exit $$rc; fi
	$(PY) scripts/release/check_dist.py dist

demo: $(APP_STAMP)
	bash scripts/demo/demo.sh
