# raidlab: `make demo` and `make test` do all set-up on a fresh Debian/Ubuntu machine (as root).
VENV    ?= .venv
PY      := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: all setup system venv demo test test-unit clean

all: setup

setup: system venv

system:
	./scripts/setup-system.sh

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: setup
	./scripts/demo.sh

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-unit: venv
	$(PY) -m pytest -m 'not root and not live and not vm' $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
