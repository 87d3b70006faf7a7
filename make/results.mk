# Results targets (included by the Makefile): benchmarks and studies -> run records -> reports.
# Every report under results/ is remade from its committed records by `make reports`;
# `make reports-check` remakes them and fails if any differs from what is committed.
CPU_STUDIES ?= iteration_time_cpu convergence_cpu h_ablation_cpu divergence_cpu bandwidth_cpu scheduler_cpu
SWEEP_ARGS ?=
SWEEP_WANDB ?= disabled
RESULTS ?= results
RUNS ?= $(RESULTS)/runs
BENCH_ARGS ?=
BENCH := $(OFFLINE) WANDB_MODE=disabled $(VENV)/bin/dreamddp-bench
RESULTS_CLI := $(VENV)/bin/dreamddp-results

.PHONY: plan-table4 fixtures reports reports-check figures paper-cpu results-wandb scheduler-reference bench bench-large bench-skew bench-tc bench-latency bench-methods methods-cards bench-unequal simulator-accuracy simulator-accuracy-tc simulator-accuracy-fast gpu gpu-reports

bench: venv ## every algorithm side by side, compute presets, 2 workers, 3 repetitions -> results/bench/headline/
	$(BENCH) run --preset headline --out $(RESULTS)/bench/headline $(BENCH_ARGS)

bench-large: venv ## every algorithm on the compute-preset Llama-2 and ResNet-50, 1 repetition -> results/bench/large/
	$(BENCH) run --models llama2 resnet50 --reps 1 --iterations 22 --no-memory --out $(RESULTS)/bench/large $(BENCH_ARGS)

bench-skew: venv ## 4 workers on 2 cores, small presets: what the workers' skew costs -> results/bench/skew/
	$(BENCH) run --preset small --nproc 4 --out $(RESULTS)/bench/skew $(BENCH_ARGS)

# On real links: the kernel's tbf shaping, one network namespace per worker (root); every
# algorithm its own job beside its emulated twin at the same rate.
bench-tc: venv ## every algorithm on real shaped links (tc) and emulated at the same rate, 3 repetitions -> results/bench/tc/
	$(BENCH) run --link tc --preset headline --out $(RESULTS)/bench/tc $(BENCH_ARGS)

LATENCIES ?= 0 10 40
# GPT-2 small: its many small units are where a collective's fixed cost per unit adds up.
bench-latency: venv ## DreamDDP with and without fused collectives at 0, 10 and 40 ms per ring hop -> results/bench/latency/
	@set -e; for ms in $(LATENCIES); do \
	  $(BENCH) run --preset small --models gpt2 --latency-ms $$ms --only flsgd dreamddp dreamddp+nofuse nosync@ideal plain@ideal \
	    --no-memory --out $(RESULTS)/bench/latency/$${ms}ms $(BENCH_ARGS); done
	$(BENCH) report $(RESULTS)/bench/latency

# The methods the field moved to beside DreamDDP and FLSGD: iteration time and bytes on the compute
# presets at comm/backward 7 and 30, and quality at equal iterations on the small presets.
METHODS := flsgd dreamddp dreamddp+topk dreamddp+q4 diloco diloco_eager sparseloco demo dreamddp_diloco \
           dreamddp_sparseloco streaming_diloco+e3m0 nosync@ideal plain@ideal
bench-methods: venv ## compression, outer optimizers, late outer updates: time at ratio 7 and 30, quality -> results/bench/methods/
	@set -e; for r in 7 30; do \
	  $(BENCH) run --preset compute --ratio $$r --only $(METHODS) --no-memory --out $(RESULTS)/bench/methods/time/ratio$$r $(BENCH_ARGS); done
	$(BENCH) report $(RESULTS)/bench/methods/time
	$(BENCH) run --preset small --iterations 330 --only $(METHODS) --no-memory --set train.eval_every=330 \
	  --out $(RESULTS)/bench/methods/quality $(BENCH_ARGS)
	@$(MAKE) --no-print-directory methods-cards

methods-cards: venv ## make bench-methods' result cards from its records -> results/bench/methods/card_ratio<r>/, card_quality/
	@set -e; for r in 7 30; do $(BENCH) card $(RESULTS)/bench/methods/time/ratio$$r $(RESULTS)/bench/methods/quality \
	  --out $(RESULTS)/bench/methods/card_ratio$$r; done
	$(BENCH) card $(RESULTS)/bench/methods/quality $(RESULTS)/bench/methods/quality --out $(RESULTS)/bench/methods/card_quality

# Unequal workers (docs/cluster.md), in a regime fixed before the run: GPT-2 small (its iterations are
# short enough for every algorithm x 4 settings x 3 repetitions), 2 workers one per core, comm/backward
# 7, 66 iterations per run (60 timed); the link calibrated at full speed in every setting. Settings:
# equal speeds; rank 1 at 0.8, then 0.5; slow spells on both (a block of 5 iterations is a spell
# with p 0.25, at a speed drawn in [0.25, 0.5]; the same spells in every run and repetition).
UNEQUAL := ssgd ascwfbp dear flsgd plsgd_enp streaming_diloco dreamddp flsgd_timed nosync@ideal plain@ideal
UNEQUAL_RUN = $(BENCH) run --preset small --models gpt2 --iterations 66 --only $(UNEQUAL) --no-memory $(BENCH_ARGS)
bench-unequal: venv ## every algorithm and flsgd_timed with one slow worker and with slow spells -> results/bench/unequal/
	$(UNEQUAL_RUN) --out $(RESULTS)/bench/unequal/equal
	$(UNEQUAL_RUN) --set 'cluster.worker_speed=[1,0.8]' --out $(RESULTS)/bench/unequal/rank1x0.8
	$(UNEQUAL_RUN) --set 'cluster.worker_speed=[1,0.5]' --out $(RESULTS)/bench/unequal/rank1x0.5
	$(UNEQUAL_RUN) --set cluster.slow_spell.p=0.25 cluster.slow_spell.length=5 cluster.slow_spell.speed_min=0.25 \
	  --out $(RESULTS)/bench/unequal/spells
	$(BENCH) report $(RESULTS)/bench/unequal

simulator-accuracy: venv ## predicted vs measured iteration time, every algorithm x 3 link rates x 2 models -> results/simulator/
	$(BENCH) accuracy --reps 3 --chunk 1 --out $(RESULTS)/simulator

simulator-accuracy-tc: venv ## the a-priori and same-job predictions against make bench-tc's real-link runs -> results/simulator/tc/
	$(BENCH) accuracy --real-link $(RESULTS)/bench/tc --out $(RESULTS)/simulator/tc

simulator-accuracy-fast: venv ## the same on a fast link (comm/backward 0.1) -> results/simulator/fast/
	$(BENCH) accuracy --ratios 0.1 --reps 3 --chunk 1 --out $(RESULTS)/simulator/fast

GPU_OUT ?= gpu_out
gpu: venv ## on a machine with a GPU: CUDA tests, profiles, every algorithm -> gpu_out/<device>/ (copy into results/gpu/)
	$(BENCH) gpu --out $(GPU_OUT)

gpu-reports: venv ## results/gpu's reports again from its committed records (no GPU needed)
	$(BENCH) gpu --reports --gpu $(RESULTS)/gpu --cpu $(RESULTS)/bench/headline

figures: venv ## tables and figures under results/ from the compact run records in results/runs
	$(RESULTS_CLI) figures --runs $(RUNS) --out $(RESULTS)

# The authors' profiles live outside the repository (../shared/reference/...); skip quietly without them.
scheduler-reference: venv ## scheduler vs exact optimum on the authors' A6000 ResNet-18 profile -> results/scheduler/
	@if $(PY) -c "from dreamddp.schedule.compare import reference_root as r; r()" 2>/dev/null; then \
	  $(RESULTS_CLI) scheduler-reference --out $(RESULTS)/scheduler; \
	else echo "scheduler-reference: reference profiles not found (DREAMDDP_REFERENCE_PROFILES); kept $(RESULTS)/scheduler"; fi

paper-cpu: venv ## run the CPU-scale studies (skips completed runs), collect their records, then make figures
	@for study in $(CPU_STUDIES); do \
	  echo "== $$study"; \
	  $(OFFLINE) WANDB_MODE=$(SWEEP_WANDB) $(VENV)/bin/dreamddp-run -m experiment=$$study $(SWEEP_ARGS) || exit $$?; \
	done
	$(RESULTS_CLI) collect --runs $(addprefix multirun/,$(CPU_STUDIES)) --out $(RUNS)
	@$(MAKE) --no-print-directory figures

results-wandb: venv ## log the speedup tables of results/runs as W&B Tables (offline, under multirun/wandb-summary)
	$(RESULTS_CLI) wandb --runs $(RUNS) --dir multirun/wandb-summary --mode offline

# Every report from its committed records; the scheduler reference is left out (its CSVs time the
# searches, so they differ run to run).
# folders of benchmark folders (sweep_report.py)
STUDIES := $(RESULTS)/bench/latency $(RESULTS)/bench/methods/time $(RESULTS)/bench/unequal
reports: venv ## remake every report under results/ from the committed records (and results/README.md)
	@set -e; for d in $$(find $(RESULTS)/bench -name bench.json -path '*/runs/bench.json' | sed 's|/runs/bench.json||; s|/tc$$||; s|/emulated$$||' | sort -u); do \
	  $(BENCH) report $$d; done
	$(BENCH) accuracy --report-only --out $(RESULTS)/simulator
	$(BENCH) accuracy --report-only --ratios 0.1 --out $(RESULTS)/simulator/fast
	@set -e; for d in $(STUDIES); do if [ -d $$d ]; then $(BENCH) report $$d; fi; done
	@if [ -d $(RESULTS)/bench/methods/quality/runs ]; then $(MAKE) --no-print-directory methods-cards; fi
	@if [ -d $(RESULTS)/bench/tc/tc/runs ]; then $(BENCH) accuracy --real-link $(RESULTS)/bench/tc --out $(RESULTS)/simulator/tc; fi
	@$(MAKE) --no-print-directory gpu-reports figures plan-table4
	$(RESULTS_CLI) index --results $(RESULTS)

reports-check: reports ## remake every report and fail if any differs from the committed one
	@git diff --stat --exit-code -- $(RESULTS) && test -z "$$(git status --porcelain --untracked-files=all -- $(RESULTS))" \
	  || { echo "reports-check: the reports above differ from their records' (commit what make reports wrote)"; exit 1; }

FIXTURE := tests/fixtures/bench_small
fixtures: venv ## remake the golden test's expected bench.csv and card from the fixture records (review the diff)
	$(BENCH) report $(FIXTURE)
	$(RESULTS_CLI) card $(FIXTURE)/runs --no-figure --csv $(FIXTURE)/card.csv > $(FIXTURE)/card.txt

plan-table4: venv ## Streaming DiLoCo's Table 4 recomputed by dreamddp-plan beside the published values -> results/plan/streaming_diloco_table4/
	$(VENV)/bin/dreamddp-plan table4 --out $(RESULTS)/plan/streaming_diloco_table4
