# slm: `make sweep` runs the default study, `make test` the fast tests. `make help` lists the rest.
PYTHON     ?= python3
VENV       ?= .venv
# torch is installed first, from this spec; on a GPU cluster e.g. `make install TORCH_SPEC="torch==2.9.1"`
TORCH_SPEC ?= torch==2.13.0
BIN        := $(VENV)/bin
STAMP      := $(VENV)/.slm-installed

.PHONY: help install test test-slow sweep bench bench-gpu clean reproduce-2512 lr-transfer coordcheck claims conf decide halving dpo search

help:
	@echo "make install    create $(VENV): torch ($(TORCH_SPEC)) first, then slm with its dev extras"
	@echo "make test       the fast test suite (installs first if needed)"
	@echo "make test-slow  the tests marked slow"
	@echo "make conf       rewrite conf/model_base/base.yaml, conf/train/default.yaml and conf/hydra/sweeper/grid.yaml from their dataclasses"
	@echo "make sweep      the default study (12 runs): cpu_default sweep, offline eval, results table, plots, report"
	@echo "                ARGS=\"...\": Hydra overrides for every job, e.g. a shrunk copy into runs/cpu_quick/:"
	@echo "                make sweep ARGS=\"train.length.steps=20 run_group=cpu_quick\""
	@echo "make claims     the study's claims judged at CPU scale (135 jobs, 5 lrs, 3 seeds): claims.md, report"
	@echo "make decide     a ladder on CPU (5 families x 4 rungs x 3 seeds; lr searched per rung, and under muP searched at"
	@echo "                the two lowest and carried up): decision accuracy per rung and proxy, the held-out forecast,"
	@echo "                a forecast at 70M parameters, the report (docs/decisions.md)"
	@echo "make decide-close  a close-call ladder on CPU (LLaMA3 and 6 one-component variants x 4 rungs, 66x in compute,"
	@echo "                5/5/5/3 seeds, decay branches, EMA weights), its synthetic probes, and LFM2 vs Canon at 0.6-10"
	@echo "                tokens per parameter: which proxy decides at 1% of the target's compute (docs/decisions.md)"
	@echo "make halving    successive halving against the full grid on CPU (90 + 90 jobs): which configurations each"
	@echo "                keeps, and the compute each spends (docs/halving.md)"
	@echo "make search     grid vs synchronous halving vs Optuna's ASHA and Hyperband vs TPE + ASHA over the component"
	@echo "                space, on CPU, with 2 workers sharing each study; the simulation at 8-512 workers (docs/search.md)"
	@echo "make dpo        issue 50's claim on CPU (docs/dpo.md): a teacher, its pairs, 3 student families x 8 arms (SFT,"
	@echo "                its token-matched control, DPO at 2 betas, DPO+SFT, IPO, ORPO, RFT) x DPO_SEEDS seeds, scored"
	@echo "                on the function-calling task; DPO_DIR/dpo.md (default runs/dpo): exact match and format validity per arm"
	@echo "make smoke      the CI smoke sweep (4 tiny runs); run again, it skips the runs already done"
	@echo "make sweep-dry SWEEP=name   a sweep's jobs, parameter counts, tokens and GPU-hours; trains nothing"
	@echo "make reproduce-2512          arXiv 2512.20877's character-level ladder (Table 1, the RoPE ablation,"
	@echo "                             the four sweeps; SEEDS seeds each), then its side-by-side tables and plot"
	@echo "make lr-transfer             learning-rate transfer: an lr grid x widths (sp, mup) and x depths (sp,"
	@echo "                             completep) on CPU, then the loss-vs-lr figures and optimal-lr table"
	@echo "make coordcheck              the muP coordinate check: activation size against width, sp and mup"
	@echo "make scaling                 a CPU scaling-law sweep (5 sizes x 5 token counts), then slm-fit: L(N, D),"
	@echo "                             bootstrap intervals, compute-optimal N and D (fit.json, fit.png)"
	@echo "make plots RESULTS=file     redraw the plots from a results table (those with data)"
	@echo "make test-slurm the Slurm tests on a local single-node cluster (root; installs Slurm from apt)"
	@echo "make bench      benchmarks: slm-train vs a bare PyTorch loop, data loader share, tokenizers, decode and"
	@echo "                scoring speed against transformers / lm-eval, a MoE step against its dense twin, a Titans"
	@echo "                memory layer's forward+backward against plain attention, AR vs masked-diffusion"
	@echo "                decoding of one shape, a sweep's plan and Slurm array at 100-10,000 jobs, the analysis at"
	@echo "                100-10,000 records, a DPO step (reference cached or frozen) against an SFT step"
	@echo "make bench-gpu  the GPU figures in one table (<= 10 min on one H100; bench/out/gpu.json): per family of the"
	@echo "                70M study, training tokens/s, MFU, peak memory, attention backend and loss path; batch-1 and"
	@echo "                batch-16 decoding against transformers; first, each fast path checked against its reference"
	@echo "                on the GPU (exit 1 on a mismatch); without CUDA one line. ARGS=\"--families llama3,dllm\""

install: $(STAMP)

# Re-installs only when pyproject.toml, this Makefile or TORCH_SPEC changed; otherwise instant. (setuptools' 10-line
# "Editable installation" warning is silenced: the checkout is the package by design.)
$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install -q -e ".[dev]"
	@echo "$(TORCH_SPEC)" > $(STAMP)

ifneq ($(wildcard $(STAMP)),)
ifneq ($(shell cat $(STAMP)),$(TORCH_SPEC))
.PHONY: $(STAMP)
endif
endif

# Two processes (pytest-xdist), each with its share of the cores (tests/conftest.py).
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

test-slow: install
	$(BIN)/python -m pytest -q -m slow

conf: install
	$(BIN)/python -m slm.cli.conf_defaults --write

# The main job: the cpu_default sweep (12 runs, embedded corpus, offline eval after each), then the
# results table, the plots that have data and the report. Started again, it trains only what is missing.
# ARGS are Hydra overrides for every job of the sweep, e.g. a shrunk or varied copy of the study:
#   make sweep ARGS="train.length.steps=20 run_group=cpu_quick"   (20 steps a job, into runs/cpu_quick/: a first look at
#                                                                  the path; too short to rank the architectures)
#   make sweep ARGS="train.lr=1e-3"                          (the study at another lr, into runs/cpu_default/)
# An override is part of every job key, so such a job never resumes or skips one of the full study's; but the table,
# plots and report cover every run of the run group, so give a variant its own run_group= to report it apart.
# A failed run is shown in the report and makes the target exit non-zero after the report is written.
# The jobs run one after another, each on SWEEP_THREADS threads (2: both cores of the CI-sized machine;
# measured 0.72x the wall time of one thread per job on these models).
RUNS ?= $(if $(SLM_RUNS),$(SLM_RUNS),runs)
# The CPU studies (lr-transfer, claims, scaling) run this many one-thread copies of slm-train side by side.
CPU_JOBS ?= 2
SWEEP_THREADS ?= 2
# the run group the sweep writes and the report reads: ARGS' run_group=..., else the sweep's own
SWEEP_GROUP = $(or $(patsubst run_group=%,%,$(lastword $(filter run_group=%,$(ARGS)))),cpu_default)
sweep: install
	@OMP_NUM_THREADS=$(SWEEP_THREADS) $(BIN)/slm-train -m sweep=cpu_default $(ARGS); rc=$$?; \
	$(BIN)/slm-collect $(RUNS)/$(SWEEP_GROUP) -o $(RUNS)/$(SWEEP_GROUP)/results.parquet && \
	$(BIN)/slm-report $(RUNS)/$(SWEEP_GROUP)/results.parquet -o $(RUNS)/$(SWEEP_GROUP)/report \
		--title "slm cpu_default$(if $(ARGS), ($(subst ",,$(ARGS)))): depth x width x family at 0.5M parameters" && \
	echo "make sweep: report: $(RUNS)/$(SWEEP_GROUP)/report/report.html (figures in $(RUNS)/$(SWEEP_GROUP)/report/figures/)" && \
	exit $$rc

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info

# Benchmarks report ratios against a reference run in the same command (never timed tests).
bench: install
	$(BIN)/python bench/train_overhead.py
	$(BIN)/python bench/eval_speed.py --threads 1
	$(BIN)/python bench/moe_step.py --threads 1
	$(BIN)/python bench/attention_masks.py --threads 1
	$(BIN)/python bench/titans_step.py --threads 1
	$(BIN)/python bench/loss_step.py --threads 1
	$(BIN)/python bench/preference_step.py --threads 1
	$(BIN)/python bench/diffusion_decode.py --threads 1
	$(BIN)/python bench/startup.py --threads 1
	$(BIN)/python bench/job_overhead.py
	$(BIN)/python bench/analysis_scale.py --threads 1
	$(BIN)/python bench/sweep_plan.py

# The GPU figures (bench/gpu.py): one table, also in bench/out/gpu.json; on a machine without CUDA one line, exit 0.
# ARGS go to the script, e.g. make bench-gpu ARGS="--families llama3,dllm --hf-families all"
bench-gpu: install
	$(BIN)/python bench/gpu.py $(ARGS)

# Redraw the analysis plots that have data (PNG + SVG) from a results table written by slm-collect:
#   make plots RESULTS=runs/cpu_default/results.parquet [OUT=dir]   (OUT defaults to plots/ next to RESULTS)
.PHONY: plots
plots: install
	@test -n "$(RESULTS)" || { echo "usage: make plots RESULTS=path/to/results.parquet [OUT=dir]" >&2; exit 2; }
	$(BIN)/slm-plot --kind all "$(RESULTS)" -o "$(if $(OUT),$(OUT),$(dir $(RESULTS))plots)"

# ---------------------------------------------------------------- sweeps (README: Sweeps)
SWEEP      ?= depth_width_gpt2_70m
SLURM_BASE ?= /tmp/slm-test-slurm
.PHONY: smoke sweep-dry test-slurm

# The CI smoke sweep (sweeps/smoke.yaml: 4 tiny jobs into runs/smoke/); run again, it trains nothing.
# One thread: models this small gain nothing from more, and lose a lot when other work shares the cores.
smoke: install
	OMP_NUM_THREADS=1 $(BIN)/slm-train -m sweep=smoke

# arXiv 2512.20877 reproduced: Table 1, the position ablation and the four sweeps under the paper's protocol (sweeps/arxiv2512_*.yaml),
# SEEDS seeds each (train.seed 0..SEEDS-1), then $(RUNS)/report-2512.20877/ladder.md with the paper's numbers beside
# ours and the NLL-per-FLOP figure. Started again, it trains only what is missing.
# LADDER_JOBS copies of the three sweeps run at once, LADDER_THREADS threads each (slm-workers: output prefixed
# [1], [2]; Ctrl-C checkpoints every copy): a copy trains the next job no other copy holds, so two 1-thread
# copies keep both cores of a laptop busy with models too small to use a second thread well.
SEEDS ?= 3
LADDER_JOBS ?= 2
LADDER_THREADS ?= 1
reproduce-2512: install
	@seeds=$$(seq -s, 0 $$(($(SEEDS) - 1))); \
	OMP_NUM_THREADS=$(LADDER_THREADS) $(BIN)/slm-workers $(LADDER_JOBS) -- sh -c "rc=0; \
		for sweep in arxiv2512_table1 arxiv2512_rope arxiv2512_sweeps; do \
			$(BIN)/slm-train -m sweep=\$$sweep train.seed=$$seeds || rc=\$$?; \
		done; exit \$$rc"; rc=$$?; \
	$(BIN)/slm-ladder $(RUNS) -o $(RUNS)/report-2512.20877 && exit $$rc

# Learning-rate transfer (docs/learning_rates.md): sweeps/lr_transfer_width.yaml (sp, mup) and
# sweeps/lr_transfer_depth.yaml (sp, completep), 128 short CPU jobs, and a second seed at the 4 lrs around the
# optima (the *_seed1 files, 64 more), in LR_JOBS one-thread copies, then
# $(RUNS)/lr_transfer/ (lr_transfer.md: the optimal lr per width and depth and how far it moves; loss-vs-lr figures).
# Started again, it trains only what is missing.
LR_JOBS ?= $(CPU_JOBS)
lr-transfer: install
	@OMP_NUM_THREADS=1 $(BIN)/slm-workers $(LR_JOBS) -- sh -c "rc=0; \
		for sweep in lr_transfer_width lr_transfer_depth lr_transfer_width_seed1 lr_transfer_depth_seed1; do \
			$(BIN)/slm-train -m sweep=\$$sweep || rc=\$$?; \
		done; \
		exit \$$rc"; rc=$$?; \
	$(BIN)/slm-lr-transfer $(RUNS)/lr_transfer_width $(RUNS)/lr_transfer_depth -o $(RUNS)/lr_transfer && exit $$rc

# slm's verdict on the study's claims at a CPU-sized budget (sweeps/claims_cpu.yaml: 135 jobs, 2 one-thread
# workers), then the claims table (slm-claims) and the report (its Claims and Learning rate sections).
claims: install
	@OMP_NUM_THREADS=1 $(BIN)/slm-workers $(CPU_JOBS) -- $(BIN)/slm-train -m sweep=claims_cpu; rc=$$?; \
	$(BIN)/slm-collect $(RUNS)/claims_cpu -o $(RUNS)/claims_cpu/results.parquet && \
	$(BIN)/slm-claims $(RUNS)/claims_cpu/results.parquet -o $(RUNS)/claims_cpu/claims.md && \
	$(BIN)/slm-report $(RUNS)/claims_cpu/results.parquet -o $(RUNS)/claims_cpu/report --score val_nll \
		--title "slm claims_cpu: the study's claims at 0.2M parameters" && exit $$rc

# Rankings across scale (docs/decisions.md): sweeps/ladder_cpu.yaml (5 families x 4 rungs x 3 seeds, the lr searched per
# rung: 240 jobs) and sweeps/ladder_cpu_mup.yaml (the same in muP, the lr searched at the two lowest rungs and carried up:
# 150 jobs), in CPU_JOBS one-thread copies, then per ladder the results table, slm-decide (decision accuracy, the
# held-out check of the top rung, a forecast at 70M parameters: decide.md, decide/*.png) and the report.
# Started again, it trains only what is missing.
LADDERS ?= ladder_cpu ladder_cpu_mup
decide: install
	@OMP_NUM_THREADS=1 $(BIN)/slm-workers $(CPU_JOBS) -- sh -c "rc=0; \
		for sweep in $(LADDERS); do $(BIN)/slm-train -m sweep=\$$sweep || rc=\$$?; done; exit \$$rc"; rc=$$?; \
	for group in $(LADDERS); do \
		$(BIN)/slm-collect $(RUNS)/$$group -o $(RUNS)/$$group/results.parquet && \
		$(BIN)/slm-decide $(RUNS)/$$group/results.parquet --forecast params=70e6 -o $(RUNS)/$$group/decide.md \
			--plot $(RUNS)/$$group/decide && \
		$(BIN)/slm-report $(RUNS)/$$group/results.parquet -o $(RUNS)/$$group/report --score val_nll \
			--title "slm $$group: a ladder of five families on CPU" || rc=1; \
	done; exit $$rc

# Close calls (docs/decisions.md, issue 51): sweeps/ladder_close.yaml (LLaMA3 and six one-component variants, 4 rungs
# spanning 66x in compute, the lr searched at the two lowest and carried up under muP, 5/5/5/3 seeds: 336 jobs, each
# with a decay branch and EMA weights), the same at 1 token per parameter (sweeps/ladder_close_t1.yaml: 210 jobs,
# the verdict's tokens-per-parameter check), the synthetic probes of its configurations (slm-probes, then
# sweeps/probes_close.yaml: 84 short jobs; the memorization probe alone at 5 seeds, sweeps/probes_close_memo.yaml: 35)
# and LFM2 against LLaMA3+Canon at 0.6-10 tokens per parameter
# (sweeps/regimes_cpu.yaml: 36 jobs with 4 decay branches each), in CPU_JOBS one-thread copies; then the ladder's
# table, slm-decide with the probes as a proxy (decide.md, decide/*.png), analysis.regimes (regimes.md) and the
# report. Started again, it trains only what is missing. About 1.5 hours on 2 idle cores (the ladder: 62 min).
CLOSE_SWEEPS ?= ladder_close ladder_close_t1 probes_close probes_close_memo regimes_cpu
.PHONY: decide-close
decide-close: install
	@SLM_RUNS=$(RUNS) $(BIN)/slm-probes $(RUNS)/probes >/dev/null && \
	SLM_RUNS=$(RUNS) OMP_NUM_THREADS=1 $(BIN)/slm-workers $(CPU_JOBS) -- sh -c "rc=0; \
		for sweep in $(CLOSE_SWEEPS); do $(BIN)/slm-train -m sweep=\$$sweep || rc=\$$?; done; exit \$$rc"; rc=$$?; \
	$(BIN)/slm-collect $(RUNS)/ladder_close -o $(RUNS)/ladder_close/results.parquet && \
	$(BIN)/slm-collect $(RUNS)/ladder_close_t1 -o $(RUNS)/ladder_close_t1/results.parquet && \
	$(BIN)/slm-collect $(RUNS)/probes_close -o $(RUNS)/probes_close/results.parquet && \
	$(BIN)/slm-collect $(RUNS)/probes_close_memo -o $(RUNS)/probes_close_memo/results.parquet && \
	$(BIN)/slm-decide $(RUNS)/ladder_close/results.parquet $(RUNS)/ladder_close_t1/results.parquet \
		--probes $(RUNS)/probes_close/results.parquet --probes $(RUNS)/probes_close_memo/results.parquet \
		-o $(RUNS)/ladder_close/decide.md --plot $(RUNS)/ladder_close/decide && \
	$(BIN)/python -m analysis.regimes $(RUNS)/regimes_cpu -o $(RUNS)/regimes_cpu/regimes.md && \
	$(BIN)/slm-report $(RUNS)/ladder_close/results.parquet -o $(RUNS)/ladder_close/report --score val_nll \
		--title "slm ladder_close: close calls on CPU" || rc=1; exit $$rc

# Successive halving against the full grid (docs/halving.md): sweeps/halving_cpu_grid.yaml (claims_cpu's 9 shapes x 5
# lrs x 2 seeds, every job to its end, validated and branched at each rung) then sweeps/halving_cpu.yaml (the same
# jobs under hydra.sweeper.halving, eta 3), each in CPU_JOBS one-thread copies, then analysis.halving: the rungs'
# agreement with the final order by stable-phase loss and by decay branch, halving's best and top 3 against the grid's,
# and the compute each spent ($(RUNS)/halving_cpu/halving.md). Started again, it trains only what is missing.
.PHONY: halving
halving: install
	@OMP_NUM_THREADS=1 $(BIN)/slm-workers $(CPU_JOBS) -- $(BIN)/slm-train -m sweep=halving_cpu_grid; rc=$$?; \
	OMP_NUM_THREADS=1 $(BIN)/slm-workers $(CPU_JOBS) -- $(BIN)/slm-train -m sweep=halving_cpu || rc=$$?; \
	$(BIN)/python -m analysis.halving $(RUNS)/halving_cpu_grid $(RUNS)/halving_cpu -o $(RUNS)/halving_cpu/halving.md \
		&& exit $$rc

# Search that prunes (docs/search.md): on halving_cpu's 45 configurations (claims_cpu's 9 shapes x 5 lrs), the full grid
# and synchronous halving (make halving's two sweeps), then Optuna over the same configurations with ASHA and with
# Hyperband (the grid sampler, seeds 0-2), and TPE + ASHA over the component space (sweeps/search_cpu.yaml, seeds 0-2),
# each in CPU_JOBS one-thread copies sharing its study; then search_cpu's 5 best rerun at 2x its budget and steps
# (sweeps/search_cpu_top.yaml), the comparison ($(RUNS)/search.md), the search's own report
# ($(RUNS)/search_cpu/search.md) and the utilisation simulation at 8, 64 and 512 workers ($(RUNS)/search_sim.md).
# Started again, it trains only what is missing.
SEARCH_SEEDS ?= 0 1 2
SEARCH_RUN = OMP_NUM_THREADS=1 $(BIN)/slm-workers $(CPU_JOBS) -- $(BIN)/slm-train -m
HYPERBAND = '~hydra.sweeper.pruner' '+hydra.sweeper.pruner={name: hyperband, min_resource: 12, max_resource: 108, reduction_factor: 3}'
.PHONY: search
search: install
	@rc=0; $(SEARCH_RUN) sweep=halving_cpu_grid || rc=$$?; $(SEARCH_RUN) sweep=halving_cpu || rc=$$?; \
	for s in $(SEARCH_SEEDS); do \
	  $(SEARCH_RUN) hydra/sweeper=optuna sweep=search_cpu_grid run_group=search_cpu_asha_s$$s \
	    hydra.sweeper.sampler.seed=$$s || rc=$$?; \
	  $(SEARCH_RUN) hydra/sweeper=optuna sweep=search_cpu_grid run_group=search_cpu_hb_s$$s \
	    hydra.sweeper.sampler.seed=$$s $(HYPERBAND) || rc=$$?; \
	  group=search_cpu_s$$s; [ $$s = 0 ] && group=search_cpu; \
	  $(SEARCH_RUN) hydra/sweeper=optuna sweep=search_cpu run_group=$$group hydra.sweeper.sampler.seed=$$s || rc=$$?; \
	done; \
	$(SEARCH_RUN) sweep=search_cpu_top || rc=$$?; \
	$(BIN)/python -m analysis.search_compare $(RUNS) -o $(RUNS)/search.md > /dev/null || rc=$$?; \
	$(BIN)/slm-search $(RUNS)/search_cpu --rerun $(RUNS)/search_cpu_top -o $(RUNS)/search_cpu/search.md \
	  > /dev/null || rc=$$?; \
	$(BIN)/slm-search-sim $(RUNS)/halving_cpu_grid -o $(RUNS)/search_sim.md > /dev/null || rc=$$?; \
	cat $(RUNS)/search.md; exit $$rc

# Scaling law on CPU (analysis/fit.py): sweeps/cpu_scaling.yaml (5 widths x 5 token budgets of the llama3 block, 25
# short jobs, 2 one-thread workers, no lm-eval), then slm-fit: L(N, D) = E + A/N^alpha + B/D^beta with bootstrap intervals, approach 2's
# IsoFLOP exponents and the compute-optimal N, D, into $(RUNS)/cpu_scaling/fit/ (fit.json, fit.png; slm-plan
# fit=$(RUNS)/cpu_scaling/fit plans a budget with it). Started again, it trains only what is missing.
.PHONY: scaling
scaling: install
	@OMP_NUM_THREADS=1 $(BIN)/slm-workers $(CPU_JOBS) -- $(BIN)/slm-train -m sweep=cpu_scaling; rc=$$?; \
	$(BIN)/slm-fit $(RUNS)/cpu_scaling -o $(RUNS)/cpu_scaling/fit && exit $$rc

# The muP coordinate check (slm-coordcheck): a few steps at 5 widths under sp and mup, activation RMS per layer
# against width in $(RUNS)/coordcheck/ (flat under a correct muP, growing under sp).
coordcheck: install
	OMP_NUM_THREADS=2 $(BIN)/slm-coordcheck model=llama3 -o $(RUNS)/coordcheck

# A sweep's jobs with parameter counts, tokens and GPU-hours, training nothing: make sweep-dry SWEEP=families_70m
sweep-dry: install
	$(BIN)/slm-train -m sweep=$(SWEEP) hydra.sweeper.dry_run=true

# Slurm from Debian packages (needs root), a single-node cluster with accounting on this machine, the
# tests marked slurm (tests/slurm/), then the cluster stopped whatever the outcome.
test-slurm: install
	tests/slurm/install.sh
	@export SLM_SLURM_BASE=$(SLURM_BASE); tests/slurm/start.sh || { tests/slurm/stop.sh; exit 1; }; \
	SLURM_CONF=$(SLURM_BASE)/etc/slurm.conf $(BIN)/python -m pytest -m slurm tests/slurm; rc=$$?; \
	tests/slurm/stop.sh; exit $$rc

# ---------------------------------------------------------------- Dhara: AR -> masked diffusion (GPU study)
# Stage 1 (sweeps/dhara_conversion_ar.yaml: llama3_canon, 1B tokens), then stage 2 once it has completed
# (sweeps/dhara_conversion.yaml: model=dhara, 100M tokens of MDLM from stage 1's weights, block curriculum),
# both into $(RUNS)/dhara_conversion/. ARGS go to both stages: Hydra options only (launcher, sweeper, eval=), e.g.
#   make dhara ARGS="hydra/launcher=slurm hydra.launcher.partition=gpu"   (the launcher waits for each stage)
#   make dhara ARGS=hydra.sweeper.dry_run=true                            (the two stages' jobs; trains nothing)
# (a model/train/data override would change stage 1's job key, which stage 2's train.init_from names).
# Started again, it skips what is completed. The CPU-sized demonstration: python bench/conversion.py
.PHONY: dhara
dhara: install
	$(BIN)/slm-train -m sweep=dhara_conversion_ar $(ARGS) && $(BIN)/slm-train -m sweep=dhara_conversion $(ARGS)

# ---------------------------------------------------------------- DPO on a verifiable task (issue 50, docs/dpo.md)
# The whole study in $(DPO_DIR) (data/, the teacher's pairs, runs/ = $SLM_RUNS of every stage, dpo.md), in order:
# the task's files (slm-toolcall); the teacher (sweeps/dpo_teacher_pre.yaml, dpo_teacher_sft.yaml) and its pairs
# (slm-pairs: DPO_K samples per training prompt at DPO_TEMPERATURE); the students (dpo_pre: DPO_FAMILIES
# pretrained; dpo_sft: SFT, DPO_SEEDS seeds); the arms from their parents (DPO_ARMS: dpo_arms = DPO at 2 betas,
# DPO+SFT, IPO; dpo_control; dpo_orpo; dpo_rft), each scored on DPO_EVAL_LIMIT items of each held-out split; then
# analysis.dpo reads the records into $(DPO_DIR)/dpo.md. Each stage waits for the one before (a child needs its
# parent's weights); within a stage DPO_JOBS one-thread copies share the jobs. Started again, it trains only what is
# missing; the teacher is trained only while $(DPO_DIR)/teacher_pairs.jsonl is missing (pairs of your own there,
# with teacher_pairs.correct.jsonl for RFT, skip it). The sizes below are kept in $(DPO_DIR)/sizes.txt: other sizes
# need another DPO_DIR (the job keys do not hold them). DPO_LR_SEARCH: multipliers of each arm's lr, the SFT arm's
# too (hydra.sweeper.lr_search, e.g. [0.5,1,2]); analysis.dpo then keeps each family x arm at its lr of lowest
# validation NLL. The arms always start from the SFT run at its stated lr (x1). Opt-in: DPO_ARMS="... dpo_onpolicy", one round of on-policy DPO (slm-pairs of each SFT run on
# its own samples into $(DPO_DIR)/onpolicy/, then DPO on them).
DPO_DIR ?= $(RUNS)/dpo
DPO_SEEDS ?= 5
DPO_JOBS ?= $(CPU_JOBS)
DPO_TEACHER_THREADS ?= 2
DPO_FAMILIES ?= gpt2,llama3,llama3_canon
DPO_ARMS ?= dpo_arms dpo_control dpo_orpo dpo_rft
DPO_LR_SEARCH ?=
DPO_TRAIN ?= 2000
DPO_CORPUS ?= 10000
DPO_K ?= 8
DPO_TEMPERATURE ?= 1.0
DPO_PAIR_ITEMS ?= 2000
DPO_TEACHER_PRE_STEPS ?= 1000
DPO_TEACHER_SFT_STEPS ?= 1200
DPO_PRE_STEPS ?= 600
DPO_SFT_STEPS ?= 800
DPO_ARM_STEPS ?= 200
DPO_EVAL_LIMIT ?= 200
DPO_SIZES = train=$(DPO_TRAIN) corpus=$(DPO_CORPUS) k=$(DPO_K) temperature=$(DPO_TEMPERATURE) \
	pair_items=$(DPO_PAIR_ITEMS) teacher_pre=$(DPO_TEACHER_PRE_STEPS) teacher_sft=$(DPO_TEACHER_SFT_STEPS) \
	pre=$(DPO_PRE_STEPS) sft=$(DPO_SFT_STEPS) arm=$(DPO_ARM_STEPS)
DPO_ENV = SLM_DPO_DIR=$(DPO_DIR) SLM_RUNS=$(DPO_DIR)/runs SLM_DPO_TEACHER_PRE_STEPS=$(DPO_TEACHER_PRE_STEPS) \
	SLM_DPO_TEACHER_SFT_STEPS=$(DPO_TEACHER_SFT_STEPS) SLM_DPO_PRE_STEPS=$(DPO_PRE_STEPS) \
	SLM_DPO_SFT_STEPS=$(DPO_SFT_STEPS) SLM_DPO_ARM_STEPS=$(DPO_ARM_STEPS) \
	SLM_DPO_ORPO_STEPS=$$(($(DPO_SFT_STEPS) + $(DPO_ARM_STEPS))) SLM_DPO_EVAL_LIMIT=$(DPO_EVAL_LIMIT)
# dpo_onpolicy's pairs: slm-pairs of each SFT run (family x seed) on its own samples, DPO_JOBS at a time
DPO_ONPOLICY_PAIRS = mkdir -p $(DPO_DIR)/onpolicy; \
	for family in $$(echo $(DPO_FAMILIES) | tr , ' '); do for seed in $$(seq 0 $$(($(DPO_SEEDS) - 1))); do \
		echo "model=$$family,train.seed=$$seed"; done; done | xargs -P $(DPO_JOBS) -I KEY sh -c \
		'test -f $(DPO_DIR)/onpolicy/KEY.jsonl || $(BIN)/slm-pairs $(DPO_DIR)/runs/dpo_sft/KEY \
		$(DPO_DIR)/onpolicy/KEY.jsonl --items $(DPO_DIR)/data/items_train.jsonl --limit $(DPO_PAIR_ITEMS) \
		-k $(DPO_K) --temperature $(DPO_TEMPERATURE) --seed 0' || rc=$$?;
DPO_STUDENT = model=$(DPO_FAMILIES) train.seed=$$(seq -s, 0 $$(($(DPO_SEEDS) - 1)))
dpo: install
	@mkdir -p $(DPO_DIR); if [ -f $(DPO_DIR)/sizes.txt ] && [ "$$(cat $(DPO_DIR)/sizes.txt)" != "$(DPO_SIZES)" ]; then \
		echo "make dpo: DPO_DIR=$(DPO_DIR) holds a study at other sizes ($$(cat $(DPO_DIR)/sizes.txt)); give another DPO_DIR" >&2; \
		exit 2; fi; echo "$(DPO_SIZES)" > $(DPO_DIR)/sizes.txt; export $(DPO_ENV); \
	test -f $(DPO_DIR)/data/manifest.json || $(BIN)/slm-toolcall $(DPO_DIR)/data --train $(DPO_TRAIN) \
		--corpus $(DPO_CORPUS) --seed 0 || exit $$?; \
	test -f $(DPO_DIR)/teacher_pairs.jsonl || { export OMP_NUM_THREADS=$(DPO_TEACHER_THREADS); \
		$(BIN)/slm-train -m sweep=dpo_teacher_pre && $(BIN)/slm-train -m sweep=dpo_teacher_sft && \
		$(BIN)/slm-pairs $(DPO_DIR)/runs/dpo_teacher_sft/model=llama3 $(DPO_DIR)/teacher_pairs.jsonl \
		--items $(DPO_DIR)/data/items_train.jsonl --limit $(DPO_PAIR_ITEMS) -k $(DPO_K) \
		--temperature $(DPO_TEMPERATURE) --seed 0; } || exit $$?; \
	export OMP_NUM_THREADS=1; rc=0; \
	$(BIN)/slm-workers $(DPO_JOBS) -- $(BIN)/slm-train -m sweep=dpo_pre model=$(DPO_FAMILIES) || rc=$$?; \
	$(BIN)/slm-workers $(DPO_JOBS) -- $(BIN)/slm-train -m sweep=dpo_sft $(DPO_STUDENT) \
		$(if $(DPO_LR_SEARCH),'hydra.sweeper.lr_search=$(DPO_LR_SEARCH)') || rc=$$?; \
	$(if $(filter dpo_onpolicy,$(DPO_ARMS)),$(DPO_ONPOLICY_PAIRS)) \
	$(BIN)/slm-workers $(DPO_JOBS) -- sh -c "rc=0; for sweep in $(DPO_ARMS); do \
		$(BIN)/slm-train -m sweep=\$$sweep $(DPO_STUDENT) $(if $(DPO_LR_SEARCH),'hydra.sweeper.lr_search=$(DPO_LR_SEARCH)') \
		|| rc=\$$?; done; exit \$$rc" || rc=$$?; \
	$(BIN)/python -m analysis.dpo $(DPO_DIR)/runs -o $(DPO_DIR)/dpo.md && exit $$rc
