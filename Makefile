# eqsat developer commands. `make demo` and `make test` work from a fresh clone with only
# Python >= 3.11 and make: they create .venv and install the project into it.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# A second interpreter (Python >= 3.12 gets egglog 14); tests run there too when one exists.
PY14 ?= $(shell for p in python3.13 python3.12 $(wildcard $(HOME)/.pyenv/versions/3.1[23]*/bin/python3); do \
	$$p -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV14 ?= .venv-egglog14
DEMO := out/demo
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (0: one process, the tests in order)
PYTEST_JOBS ?= 2
XDIST := -n $(PYTEST_JOBS) --dist worksteal

.PHONY: demo test test-main test-egglog14 lint corpus roundtrip-corpus clean

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
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The same suite on egglog 14 (Python >= 3.12), when such a Python is installed: less the
# tests marked slow, less those marked no_egglog (they call no egglog: tests/conftest.py's guard
# fails one that does, in the pass above), less those marked egglog_incidental (the modules
# whose subject is a part of eqsat that calls no egglog, listed by subject in tests/conftest.py's
# EGGLOG_INCIDENTAL: verification, the command line's checks of inputs, outputs and environment,
# reports, the memory planner, measured cost models and plugins, benchmark harnesses; none holds
# a rule test or imports egglog or a module of eqsat that does, tests/test_suite_markers.py
# checks), and the onnx wheel's round trip on a sample of 300 models of each kind.
test-egglog14:
ifeq ($(PY14),)
	@echo "test-egglog14: no Python >= 3.12 found; egglog 14 not tested"
else
	@test -x $(VENV14)/bin/python || $(PY14) -m venv $(VENV14)
	@test -f $(VENV14)/.installed-stamp -a $(VENV14)/.installed-stamp -nt pyproject.toml || \
		{ $(VENV14)/bin/python -m pip install -q --upgrade pip && \
		  $(VENV14)/bin/python -m pip install -q -e '.[cpu,dev]' && touch $(VENV14)/.installed-stamp; }
	$(VENV14)/bin/python -c "import importlib.metadata as m, sys; print('egglog', m.version('egglog'), 'on Python', sys.version.split()[0])"
	EQSAT_ROUNDTRIP_SAMPLE=$${EQSAT_ROUNDTRIP_SAMPLE:-300} $(VENV14)/bin/python -m pytest -m "not slow and not no_egglog and not egglog_incidental" $(XDIST) $(PYTEST_ARGS)
endif

# A long fuzzing campaign (tests/fuzz/campaign.py): every fuzz property in turn for FUZZ_MINUTES
# (default 30), in fresh worker processes; prints the examples run per property and the failures
# (logs and shrunk inputs in out/fuzz/); failures found are replayed first by the next campaign.
FUZZ_MINUTES ?= 30
.PHONY: fuzz
fuzz: $(STAMP)
	$(PY) -m tests.fuzz.campaign --minutes $(FUZZ_MINUTES)

# The benchmark corpus: PyTorch exports with random weights (torch 2.13.0 CPU, transformers).
BENCH_STAMP := $(VENV)/.installed-bench-stamp
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[cpu,dev,bench]'
	@touch $(BENCH_STAMP)

corpus: $(BENCH_STAMP)
	$(PY) benchmarks/corpus.py
	$(PY) benchmarks/corpus.py --dynamo
	$(PY) benchmarks/light_models.py
	$(PY) benchmarks/cnn_styles.py
	$(PY) benchmarks/torchvision_models.py
	$(PY) benchmarks/hf_vision_models.py

# eqsat beside onnxruntime's optimizer, onnxsim, onnxslim, onnxoptimizer, onnxscript:
# benchmarks/RESULTS.md and benchmarks/results/peers_*.png (cached in benchmarks/out/; BENCH_ARGS for more flags).
.PHONY: bench
bench: $(BENCH_STAMP)
	@test -f benchmarks/models/resnet50.dynamo.onnx -a -f benchmarks/models/light_resnet50.onnx || $(MAKE) corpus
	$(PY) benchmarks/peers.py $(BENCH_ARGS)

# The CNN corpus beside onnxruntime's ORT_ENABLE_ALL saved model, at 1 thread and at onnxruntime's
# default thread count, development and held-out sets apart: benchmarks/results/cnn.md.
.PHONY: bench-cnn
bench-cnn: $(BENCH_STAMP)
	@test -f benchmarks/models/tv_resnet18.onnx -a -f benchmarks/models/hf_swin.onnx || $(MAKE) corpus
	$(PY) benchmarks/peers.py --only $$($(PY) benchmarks/cnn_report.py --names) --tools eqsat,ort-all,control \
		--settings off,all,off-mt,all-mt --results benchmarks/results/peers-cnn.md --plots benchmarks/results/cnn $(BENCH_ARGS)
	$(PY) benchmarks/cnn_report.py

# Every corpus model's saturated e-graph, in eqsat's format and extraction-gym's, indexed
# (docs/egraph-dataset.md) in build/egraph-dataset; DATASET_ARGS=--programs 100 also measures
# program sets (hours on two cores).
.PHONY: egraph-dataset
egraph-dataset: $(BENCH_STAMP)
	@test -f benchmarks/models/tv_resnet18.onnx -a -f benchmarks/models/resnet50.dynamo.onnx || $(MAKE) corpus
	$(PY) benchmarks/egraph_dataset.py $(DATASET_ARGS)

roundtrip-corpus: $(STAMP)
	$(PY) benchmarks/roundtrip.py

clean:
	rm -rf out .pytest_cache .ruff_cache build *.egg-info
