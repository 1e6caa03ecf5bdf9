# slm: `make sweep` runs the default study, `make test` the fast tests. `make help` lists the rest.
PYTHON     ?= python3
VENV       ?= .venv
# torch is installed first, from this spec; on a GPU cluster e.g. `make install TORCH_SPEC="torch==2.9.1"`
TORCH_SPEC ?= torch==2.13.0
BIN        := $(VENV)/bin
STAMP      := $(VENV)/.slm-installed

.PHONY: help install test test-slow sweep bench clean

help:
	@echo "make install    create $(VENV): torch ($(TORCH_SPEC)) first, then slm with its dev extras"
	@echo "make test       the fast test suite (installs first if needed)"
	@echo "make test-slow  the tests marked slow"
	@echo "make sweep      the default study (see README: what it runs today)"
	@echo "make bench      benchmarks: slm-train vs a bare PyTorch loop, data loader share, tokenizers"

install: $(STAMP)

# Re-installs only when pyproject.toml, this Makefile or TORCH_SPEC changed; otherwise instant.
$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	@echo "$(TORCH_SPEC)" > $(STAMP)

ifneq ($(wildcard $(STAMP)),)
ifneq ($(shell cat $(STAMP)),$(TORCH_SPEC))
.PHONY: $(STAMP)
endif
endif

test: install
	$(BIN)/python -m pytest

test-slow: install
	$(BIN)/python -m pytest -m slow

# Today: prints the exact size of every model preset. Training sweeps land with the training and
# sweep issues; this target then runs the cpu_default sweep end to end.
sweep: install
	@for m in gpt2 llama3 qwen3 gemma3 llama3_canon mobilellm mobilellm_ls design_40m debug; do \
		$(BIN)/slm-params model=$$m | $(BIN)/python -c "import json,sys; r=json.load(sys.stdin); \
		print(f\"{'$$m':14s} {r['params_total']:>13,d} params  {r['flops_per_token']:>15,d} FLOPs/token\")"; \
	done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info

# Benchmarks report ratios against a reference run in the same command (never timed tests).
bench: install
	$(BIN)/python bench/train_overhead.py

# Redraw the six analysis plots (PNG + SVG) from a results table written by slm-collect:
#   make plots RESULTS=runs/cpu_default/results.parquet [OUT=dir]   (OUT defaults to plots/ next to RESULTS)
.PHONY: plots
plots: install
	@test -n "$(RESULTS)" || { echo "usage: make plots RESULTS=path/to/results.parquet [OUT=dir]" >&2; exit 2; }
	$(BIN)/slm-plot --kind all "$(RESULTS)" -o "$(if $(OUT),$(OUT),$(dir $(RESULTS))plots)"
