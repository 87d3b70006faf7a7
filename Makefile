# dreamddp: `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
# Offline and quiet by default: no hub downloads, W&B off in tests.
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
PYTEST_ARGS ?= -q
RUN_ARGS ?=

.PHONY: help venv lock run test test-all reports reports-check clean

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-24s %s\n", $$1, $$2}'

venv: $(STAMP) ## create .venv and install dreamddp (fast when nothing changed)

# Re-runs only when the requirements, constraints or package metadata change.
$(STAMP): requirements.txt requirements-nodeps.txt constraints.txt constraints-lock.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q -c constraints.txt -c constraints-lock.txt -r requirements.txt
	$(PIP) install -q --no-deps -r requirements-nodeps.txt
	$(PIP) install -q --no-deps -e .
	@if dpkg -s dataset-fashion-mnist >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist \
	    || echo "warning: could not install dataset-fashion-mnist; data=fashion_mnist will be unavailable"; \
	else echo "warning: not root, skipping apt-get install dataset-fashion-mnist (data=fashion_mnist needs it)"; fi
	touch $(STAMP)

# The lock pins every other package to what resolved when it was made, for the Python it was
# made with only (a marker per line): another Python resolves freely from requirements.txt.
LOCK_VENV := /tmp/dreamddp-lock-venv
lock: ## re-resolve requirements.txt in a scratch venv and pin the result in constraints-lock.txt (then run make test)
	rm -rf $(LOCK_VENV) && python3 -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install -q -c constraints.txt -r requirements.txt
	{ echo "# Made by make lock on $$(date -u +%F) with Python $$($(LOCK_VENV)/bin/python -c 'import platform; print(platform.python_version())'): commit it once make test passes with it."; \
	  echo "# Not here: torch, torchvision, hydra-core (constraints.txt pins them for every Python)."; \
	  marker=$$($(LOCK_VENV)/bin/python -c 'import sys; print("python_version == \"%d.%d\"" % sys.version_info[:2])'); \
	  $(LOCK_VENV)/bin/pip freeze --exclude-editable | grep -viE '^(torch|torchvision|hydra-core)==' | sed "s/$$/ ; $$marker/"; } > constraints-lock.txt
	rm -rf $(LOCK_VENV)

# The harness's main job: S-SGD, FLSGD and DreamDDP side by side on 2 workers, GPT-2's CPU-sized
# preset, an emulated link whose all-reduce of all parameters takes 7x the backward pass; prints
# the result card (RUN_ARGS="--set train.lr=3e-4 ..." passes dreamddp-bench run options).
run: venv ## S-SGD, FLSGD and DreamDDP side by side (2 CPU workers, slow emulated link): the result card
	$(OFFLINE) WANDB_MODE=disabled $(VENV)/bin/dreamddp-bench run runners/quickstart.yaml --out outputs/quickstart $(RUN_ARGS)

# The suite without the tests marked slow (long multi-process runs that faster tests cover in
# part) or gpu (CUDA); tests marked tc run where this host can shape links (root, tbf) and skip
# elsewhere. `make test-all` runs everything.
TEST_MARKS ?= not slow and not gpu
test: venv ## the test suite without slow and gpu tests, offline, W&B disabled (PYTEST_ARGS to pass options)
	$(OFFLINE) WANDB_MODE=disabled $(PY) -m pytest -m "$(TEST_MARKS)" $(PYTEST_ARGS)

test-all: venv ## every test, the slow and gpu ones too (gpu ones skip without a GPU)
	$(OFFLINE) WANDB_MODE=disabled $(PY) -m pytest $(PYTEST_ARGS)

clean: ## remove run outputs and caches (keeps .venv and data_cache/)
	rm -rf outputs multirun wandb .pytest_cache .hypothesis build
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

# Studies, tables and figures (make figures, make paper-cpu, ...).
-include make/results.mk
