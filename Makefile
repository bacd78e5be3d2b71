# eqsat developer commands. `make demo` and `make test` work from a fresh clone with only
# Python >= 3.11 and make: they create .venv and install the project into it.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# A second interpreter (Python >= 3.12 gets egglog 14); tests run there too when one exists.
PY14 ?= $(firstword $(foreach p,python3.13 python3.12 $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3) $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3),$(shell command -v $(p) 2>/dev/null)))
VENV14 ?= .venv-egglog14
DEMO := out/demo
PYTEST_ARGS ?=

.PHONY: demo test test-main test-egglog14 lint bench corpus clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cpu,dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m eqsat.demo build $(DEMO)/model.onnx
	$(VENV)/bin/eqsat optimize $(DEMO)/model.onnx -o $(DEMO)/model.opt.onnx --report $(DEMO)/report.json
	$(PY) -m eqsat.demo summary $(DEMO)/model.onnx $(DEMO)/model.opt.onnx $(DEMO)/report.json

test: lint test-main test-egglog14

lint: $(STAMP)
	$(VENV)/bin/ruff check eqsat extract tests benchmarks

test-main: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

# The same suite on egglog 14 (Python >= 3.12), when such a Python is installed.
test-egglog14:
ifeq ($(PY14),)
	@echo "test-egglog14: no Python >= 3.12 found; egglog 14 not tested"
else
	@test -x $(VENV14)/bin/python || $(PY14) -m venv $(VENV14)
	@test -f $(VENV14)/.installed-stamp -a $(VENV14)/.installed-stamp -nt pyproject.toml || \
		{ $(VENV14)/bin/python -m pip install -q --upgrade pip && \
		  $(VENV14)/bin/python -m pip install -q -e '.[cpu,dev]' && touch $(VENV14)/.installed-stamp; }
	$(VENV14)/bin/python -c "import egglog, sys; print('egglog', egglog.__version__ if hasattr(egglog, '__version__') else '', 'on Python', sys.version.split()[0])"
	$(VENV14)/bin/python -m pytest $(PYTEST_ARGS)
endif

clean:
	rm -rf out .pytest_cache .ruff_cache build *.egg-info
