# factutil: two commands for a fresh machine (see README.md).
#   make demo   create .venv, install (CPU torch first), score the bundled real 2Wiki sample
#   make test   create .venv, install with test extras, run the whole test suite
PYTHON ?= python3
VENV ?= .venv
# CPU torch first, so sentence-transformers does not pull a multi-GB CUDA build. Override for GPU.
TORCH_SPEC ?= torch==2.13.0
BIN = $(VENV)/bin
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1

.PHONY: demo test venv lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.torch: | $(BIN)/python
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	touch $@

venv: $(VENV)/.torch

demo: venv
	$(BIN)/pip install --quiet -e '.[examples]'
	$(BIN)/factutil score examples/data/2wiki_rollouts.jsonl -o out/2wiki_scored.jsonl
	$(BIN)/python examples/credit_check.py examples/data/2wiki_rollouts.jsonl --modes exact,semantic --plot out/2wiki_utility.png

test: venv
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/python -m pytest -q

lint:
	$(BIN)/ruff check factutil tests examples

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
