# raidlab: `make demo` and `make test` do all set-up on a fresh Debian/Ubuntu machine (as root).
VENV    ?= .venv
PY      := $(VENV)/bin/python
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`: one per core, and at least four: the live and VM
# tests wait much of their time on QEMU, fio, sleeps and the emulated disks, so more workers
# than cores still gain: on two cores four workers finished the suite in 1,174 s, where the
# sum of its test durations was 4,358 s. More do not: with a tmpfs /tmp (as on CI), four
# workers took 1,273 s and six 1,335 s (beside about 105 s of one core's other work), the two
# cores busy throughout. `--dist worksteal`: a worker
# that runs out of tests takes the ones another has not started yet, so the long VM and
# live tests (which tests/conftest.py starts first) are not left queued behind each other
# on one worker.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -lt 4 ] && n=4; echo $$n)

.PHONY: all setup system venv demo test test-long test-unit clean

all: setup

setup: system venv

system:
	./scripts/setup-system.sh

venv: $(VENV)/.installed

# The editable install also builds the compiled modules (raidlab.compiled, setup.py), so it
# runs again whenever one of their sources changes: a compiled module never lags its .py file.
COMPILED_PXD := $(wildcard raidlab/*.pxd raidlab/*/*.pxd raidlab/*/*/*.pxd)
$(VENV)/.installed: pyproject.toml setup.py $(COMPILED_PXD) $(COMPILED_PXD:.pxd=.py)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: setup
	./scripts/demo.sh

# pytest exits 5 when it collected no test: treat that as a failure, not a pass. The 25
# slowest tests are listed at the end, so a log shows where the suite's time goes.
# `make test` is the suite without the tests marked `long` (tests/conftest.py says which);
# `make test-long` runs those; .ci/run runs both.
define run_pytest
	$(PY) -m pytest -n $(TEST_JOBS) --dist worksteal --durations=25 -m $(1) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make $@: no tests collected" >&2; exit 1; fi; exit $$rc
endef

test: setup
	$(call run_pytest,'not slow and not long')

test-long: setup
	$(call run_pytest,'long and not slow')

# A -m of its own replaces pyproject's `-m 'not slow'`, so it says `not slow` again.
test-unit: venv
	$(PY) -m pytest -n $(TEST_JOBS) --dist worksteal -m 'not root and not live and not vm and not slow' $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info raidlab/disks/mechanisms/hddcore.c
	find raidlab -name "*.so" -delete
