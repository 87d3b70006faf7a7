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

.PHONY: plan-table4 fixtures reports reports-check figures paper-cpu results-wandb scheduler-reference bench bench-large bench-skew bench-tc bench-latency bench-methods methods-cards bench-fsdp bench-unequal simulator-accuracy simulator-accuracy-tc simulator-accuracy-fast gpu gpu-reports

# Every study is one file under runners/ (models, runs, regime, repetitions, parts, reports, claims):
# `dreamddp-bench run runners/<study>.yaml --dry-run` lists its jobs; --resume keeps the completed ones.
bench: venv ## every algorithm side by side, compute presets, 2 workers, 3 repetitions -> results/bench/headline/
	$(BENCH) run runners/headline.yaml --out $(RESULTS)/bench/headline $(BENCH_ARGS)

bench-large: venv ## every algorithm on the compute-preset Llama-2 and ResNet-50, 1 repetition -> results/bench/large/
	$(BENCH) run runners/large.yaml --out $(RESULTS)/bench/large $(BENCH_ARGS)

bench-skew: venv ## 4 workers on 2 cores, small presets: what the workers' skew costs -> results/bench/skew/
	$(BENCH) run runners/skew.yaml --out $(RESULTS)/bench/skew $(BENCH_ARGS)

bench-tc: venv ## every algorithm on real shaped links (tc, root) and emulated at the same rate, 3 repetitions -> results/bench/tc/
	$(BENCH) run runners/tc.yaml --out $(RESULTS)/bench/tc $(BENCH_ARGS)

bench-latency: venv ## DreamDDP with and without fused collectives at 0, 10 and 40 ms per ring hop -> results/bench/latency/
	$(BENCH) run runners/latency.yaml --out $(RESULTS)/bench/latency $(BENCH_ARGS)

bench-methods: venv ## compression, outer optimizers, late outer updates: time at ratio 7 and 30, quality, cards -> results/bench/methods/
	$(BENCH) run runners/methods.yaml --out $(RESULTS)/bench/methods $(BENCH_ARGS)

bench-fsdp: venv ## FSDP2 inside each replica: FLSGD, DreamDDP, S-SGD (HSDP) at 2 replicas x 2 shards beside unsharded -> results/bench/fsdp/
	$(BENCH) run runners/fsdp.yaml --out $(RESULTS)/bench/fsdp $(BENCH_ARGS)

bench-unequal: venv ## every algorithm and flsgd_timed with one slow worker and with slow spells -> results/bench/unequal/
	$(BENCH) run runners/unequal.yaml --out $(RESULTS)/bench/unequal $(BENCH_ARGS)

simulator-accuracy: venv ## predicted vs measured iteration time, every algorithm x 3 link rates x 2 models -> results/simulator/
	$(BENCH) run runners/accuracy.yaml --out $(RESULTS)/simulator $(BENCH_ARGS)

simulator-accuracy-tc: venv ## each run's a-priori prediction on the real shaped link: every algorithm and recipe, unequal workers, a slow uplink (root, about 2 h) -> results/simulator/tc/
	$(BENCH) run runners/accuracy_tc.yaml --out $(RESULTS)/simulator/tc

simulator-accuracy-fast: venv ## the same on a fast link (comm/backward 0.1) -> results/simulator/fast/
	$(BENCH) run runners/accuracy_fast.yaml --out $(RESULTS)/simulator/fast $(BENCH_ARGS)

methods-cards: venv ## bench-methods' reports (its sweep and cards) again from its records
	$(BENCH) report runners/methods.yaml

GPU_OUT ?= gpu_out
gpu: venv ## on a machine with a GPU: CUDA tests, profiles, every algorithm -> gpu_out/<device>/ (copy into results/gpu/)
	$(BENCH) run runners/gpu.yaml --out $(GPU_OUT)

gpu-reports: venv ## results/gpu's reports again from its committed records (no GPU needed)
	$(BENCH) report runners/gpu.yaml

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

# Every report from its committed records: each study file's report entries (runners/*.yaml; one
# whose records are not there, such as make run's under outputs/, is skipped), then
# the figures and the index.  The scheduler reference is left out (its CSVs time the
# searches, so they differ run to run).
reports: venv ## remake every report under results/ from the committed records (and results/README.md)
	@set -e; for f in runners/*.yaml; do $(BENCH) report $$f; done
	@$(MAKE) --no-print-directory figures
	$(RESULTS_CLI) index --results $(RESULTS)

reports-check: reports ## remake every report and fail if any differs from the committed one
	@git diff --stat --exit-code -- $(RESULTS) && test -z "$$(git status --porcelain --untracked-files=all -- $(RESULTS))" \
	  || { echo "reports-check: the reports above differ from their records' (commit what make reports wrote)"; exit 1; }

FIXTURE := tests/fixtures/bench_small
fixtures: venv ## remake the golden test's expected bench.csv and card from the fixture records (review the diff)
	$(BENCH) report $(FIXTURE)
	$(RESULTS_CLI) card $(FIXTURE)/runs --no-figure --csv $(FIXTURE)/card.csv > $(FIXTURE)/card.txt

plan-table4: venv ## Streaming DiLoCo's Table 4 recomputed by dreamddp-plan beside the published values (runners/plan_table4.yaml) -> results/plan/streaming_diloco_table4/
	$(BENCH) run runners/plan_table4.yaml --out $(RESULTS)/plan/streaming_diloco_table4
