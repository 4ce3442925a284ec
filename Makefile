# make test   set everything up on a fresh Debian machine, then run the tests
# make bench  set everything up, then run the framed echo benchmark (about two minutes)
# make bench-all  the whole benchmark suite, results in benchmarks/results/
# make docs   the Sphinx site in docs/_build/html (warnings are errors)
# make wheel  a manylinux wheel in dist/ with liburing linked in, then its smoke test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SOURCES := pyproject.toml setup.py _build_cffi.py _build_liburing.py $(wildcard src/*.c src/*.h src/*.cdef)

.PHONY: test test-all soak asan lint bench bench-all bench-deps system-deps clean

test: lint
	$(PY) -m pytest
	$(PY) tests/aiofiles_suite.py
	$(PY) tests/stdlib_suite.py

# The suite on every supported CPython that pyenv (or PATH) has: 3.10 to 3.13,
# less the versions in SKIP_VERSIONS (CI skips the one `make test` just ran).
# pytest runs a worker per CPU here (pytest-xdist): most tests wait on the
# kernel rather than the CPU, so two workers on two CPUs take half the time.
SKIP_VERSIONS ?=
test-all: system-deps
	@set -e; ran=""; \
	for v in 3.10 3.11 3.12 3.13; do \
	  case " $(SKIP_VERSIONS) " in *" $$v "*) echo "test-all: Python $$v skipped (SKIP_VERSIONS)"; continue;; esac; \
	  py=$$(ls -d "$$(pyenv root 2>/dev/null)"/versions/$$v.*/bin/python 2>/dev/null | tail -n 1); \
	  [ -n "$$py" ] || py=$$(command -v python$$v || true); \
	  if [ -z "$$py" ]; then echo "test-all: no Python $$v here, skipped"; continue; fi; \
	  [ -x .venv-$$v/bin/python ] || $$py -m venv .venv-$$v; \
	  .venv-$$v/bin/python -m pip install -q -e '.[test]'; \
	  echo "== Python $$v ($$py)"; \
	  .venv-$$v/bin/python -m pytest -q -n auto; \
	  .venv-$$v/bin/python tests/aiofiles_suite.py; \
	  .venv-$$v/bin/python tests/stdlib_suite.py; \
	  ran="$$ran $$v"; \
	done; \
	echo "test-all: passed on$$ran"

# The long soak (a million mixed operations per loop and backend; minutes).
soak: $(VENV)/.installed-test
	$(PY) -m pytest -m slow -s -v tests/test_soak.py

# The ring's C (the binding and the core) built with AddressSanitizer into
# build/asan, away from the tree's own build, and the stream, cancel, fault,
# soak and fd-operation tests run against it (PYTHONMALLOC=malloc: every
# Python object is a malloc block ASan watches).  Leak checking is off: the
# interpreter keeps memory until exit by design.
ASAN_TESTS := tests/test_streams.py tests/test_streams_edges.py tests/test_faults.py tests/test_soak.py \
              tests/test_ring.py tests/test_ops.py tests/test_cold.py tests/test_sqpoll.py tests/test_filemethod.py \
              tests/test_files_edges.py
asan: $(VENV)/.installed-test
	rm -rf build/asan build/asan-tmp
	mkdir -p build/asan && cp -r aioring build/asan/ && rm -f build/asan/aioring/*.so
	$(PY) -m pip install -q 'setuptools>=77'  # (setup.py build_ext runs with the venv's own: pyproject's license needs 77)
	CFLAGS="-fsanitize=address -fno-omit-frame-pointer -g" LDFLAGS="-fsanitize=address" \
	  $(PY) setup.py -q build_ext --build-lib build/asan --build-temp build/asan-tmp
	cd build/asan && ASAN_OPTIONS=detect_leaks=0 PYTHONMALLOC=malloc \
	  LD_PRELOAD=$$($(CC) -print-file-name=libasan.so) PYTHONPATH=$(CURDIR)/build/asan \
	  $(CURDIR)/$(PY) -c 'import aioring._core as c, aioring._liburing as l; \
	    assert "build/asan" in c.__file__ and "build/asan" in l.__file__, (c.__file__, l.__file__)' && \
	  ASAN_OPTIONS=detect_leaks=0 PYTHONMALLOC=malloc \
	  LD_PRELOAD=$$($(CC) -print-file-name=libasan.so) PYTHONPATH=$(CURDIR)/build/asan \
	  $(CURDIR)/$(PY) -m pytest -q -p no:cacheprovider --rootdir=$(CURDIR) -c $(CURDIR)/pyproject.toml \
	    $(addprefix $(CURDIR)/,$(ASAN_TESTS))

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check aioring tests benchmarks _build_cffi.py _build_liburing.py setup.py .ci/wheel_needs.py
	$(VENV)/bin/mypy

# Prints a line per run, then the tables; writes benchmarks/results/framed_echo.json and .png.
bench: $(VENV)/.installed-bench
	$(PY) benchmarks/framed_echo.py

BENCHMARKS := framed_echo file_reads sequential small_files pipes echo_rps aiofiles_ops cold_reads tree_ops idle_conns

# Every benchmark in turn, each writing benchmarks/results/<name>.json; one that fails
# does not stop the others, but makes the target fail at the end.
# cold_reads prints fio's figure as the device's limit: fio comes from Debian.
bench-all: $(VENV)/.installed-bench bench-deps
	@failed=""; \
	for b in $(BENCHMARKS); do \
	  echo "== benchmarks/$$b.py"; \
	  $(PY) benchmarks/$$b.py --json benchmarks/results/$$b.json || failed="$$failed $$b"; \
	done; \
	if [ -n "$$failed" ]; then echo "bench-all: failed:$$failed"; exit 1; fi

bench-deps:
	@command -v fio >/dev/null 2>&1 || { echo "installing: fio"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq fio \
	  || echo "fio could not be installed: cold_reads prints no device limit"; }

# Debian packages the build needs and a fresh machine may lack.
system-deps:
	@missing=""; \
	[ -f /usr/include/liburing.h ] || missing="$$missing liburing-dev"; \
	command -v cc >/dev/null 2>&1 || missing="$$missing gcc libc6-dev"; \
	command -v $(PYTHON) >/dev/null 2>&1 || missing="$$missing python3"; \
	if command -v $(PYTHON) >/dev/null 2>&1; then \
	  $(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
	    || missing="$$missing python3-dev"; \
	  $(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
	fi; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(VENV)/bin/python: | system-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed-test: $(SOURCES) | $(VENV)/bin/python system-deps
	$(PY) -m pip install -q -e '.[test]'
	touch $@

$(VENV)/.installed-bench: $(SOURCES) | $(VENV)/bin/python system-deps
	$(PY) -m pip install -q -e '.[test,bench]'
	touch $@

# ---- docs and wheel ------------------------------------------------------
.PHONY: docs wheel

docs: $(VENV)/.installed-docs
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# The wheel links liburing statically (AIORING_LIBURING=static: every extension
# module), auditwheel retags it with the manylinux tag this machine's glibc
# allows, and the build fails if it needs any shared library beyond glibc.
# Then it is installed into a fresh virtualenv away from the source tree and a
# smoke subset of the suite runs against it; the sdist is built and installed too.
wheel: $(VENV)/.installed-wheel
	rm -rf build .cache/wheel
	AIORING_LIBURING=static $(PY) -m build --wheel --outdir .cache/wheel .
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/auditwheel repair -w dist .cache/wheel/aioring-*.whl
	$(PY) .ci/wheel_needs.py dist/aioring-$$($(PY) -c 'import aioring; print(aioring.__version__)')-*manylinux*.whl
	$(PY) -m pytest -m dist -p no:cacheprovider tests/test_dist.py

EXTRAS_docs  := docs
EXTRAS_wheel := test,wheel
$(VENV)/.installed-docs $(VENV)/.installed-wheel: $(VENV)/.installed-%: $(SOURCES) | $(VENV)/bin/python system-deps
	$(PY) -m pip install -q -e '.[$(EXTRAS_$*)]'
	touch $@

clean:
	rm -rf $(VENV) .venv-3.* .cache build *.egg-info aioring/*.so aioring/_liburing.c tests/.scratch benchmarks/.data dist docs/_build
