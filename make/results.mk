# Results targets (included by the Makefile): studies -> run records -> tables and figures.
#   make figures      regenerate results/tables, results/figures, results/scheduler_measured
#                     from the committed compact records in results/runs (seconds)
#   make paper-cpu    run the CPU-scale studies on this host (skipping runs already
#                     completed), copy their records to results/runs, then `make figures`
#                     (about 35-45 min on 2 cores; see results/README.md)
#   make results-wandb  log the speedup tables as W&B Tables (offline; `wandb sync` later)
# Variables: CPU_STUDIES (which presets), SWEEP_ARGS (extra overrides for every sweep),
# SWEEP_WANDB (W&B mode of the training runs; disabled keeps 40 runs from starting 40
# W&B services on a 2-core host), RESULTS (output dir), RUNS (compact records dir).
CPU_STUDIES ?= iteration_time_cpu convergence_cpu h_ablation_cpu divergence_cpu bandwidth_cpu scheduler_cpu
SWEEP_ARGS ?=
SWEEP_WANDB ?= disabled
RESULTS ?= results
RUNS ?= $(RESULTS)/runs

.PHONY: figures paper-cpu results-wandb scheduler-reference bench bench-large bench-skew simulator-accuracy simulator-accuracy-fast merge-delay compute-split engine-phases gpu gpu-reports

BENCH_ARGS ?=

bench: venv ## every algorithm side by side in the compute regime, 2 workers (one per core), 3 repetitions -> results/bench/README.md (~40 min)
	$(OFFLINE) WANDB_MODE=disabled $(PY) runners/bench.py --preset headline $(BENCH_ARGS)

# Llama-2 and ResNet-50 do not fit make bench's 45 minutes with three repetitions: one, two timed windows.
bench-large: venv ## every algorithm on the compute-regime Llama-2 and ResNet-50, 2 workers, 1 repetition -> results/bench_large/README.md (~19 min)
	$(OFFLINE) WANDB_MODE=disabled $(PY) runners/bench.py --models llama2 resnet50 --reps 1 --iterations 22 --no-memory --out results/bench_large $(BENCH_ARGS)

bench-skew: venv ## the same with 4 workers on 2 cores, small presets: what the workers' skew costs -> results/bench_skew/README.md (~30 min)
	$(OFFLINE) WANDB_MODE=disabled $(PY) runners/bench.py --preset small --nproc 4 --out results/bench_skew $(BENCH_ARGS)

# The simulator's jobs interleave one iteration per turn: the host's slow spells then fall on every
# run alike (results/interleave/README.md: half the drift of one H-window per turn, make bench's).
simulator-accuracy: venv ## predicted vs measured iteration time, every algorithm x 3 link rates x 2 models, 3 repetitions -> results/simulator/README.md (~80 min)
	$(OFFLINE) WANDB_MODE=disabled $(PY) runners/simulator_accuracy.py --reps 3 --chunk 1

# The same on a fast link (comm/backward 0.1), where gloo's own transfer at the waits, not the link,
# is what a wait waits for: the real transfer's model, each collective kind probed on its own.
simulator-accuracy-fast: venv ## predicted vs measured on a fast link (comm/backward 0.1), every algorithm x 2 models, 3 repetitions -> results/simulator_fast/README.md (~23 min)
	$(OFFLINE) WANDB_MODE=disabled $(PY) runners/simulator_accuracy.py --ratios 0.1 --reps 3 --chunk 1 --out results/simulator_fast

merge-delay: venv ## DreamDDP with merge_delay 0, 1, 2: quality at equal iterations, time to target, divergence -> results/merge_delay/README.md (~30 min)
	$(OFFLINE) WANDB_MODE=disabled $(PY) runners/merge_delay_study.py

compute-split: venv ## forward / backward / step split of every model.size=compute preset -> results/bench/compute_split.md (~5 min)
	$(OFFLINE) WANDB_MODE=disabled $(PY) runners/compute_split.py

PHASES_MD := results/bench/engine_phases.md
# nosync (the engine alone) and the DreamDDP variants (their own host-side work, no waits) on the
# compute presets make bench runs, at its H, each with the carrier make bench's emulated link gives
# it on the CPU (bandwidth.carrier=auto); nosync on ResNet-50 paper (161 gradient hooks)
PHASE_RUNS := "--algo nosync" "--algo dreamddp --set H=10 --carrier deferred" \
              "--algo dreamddp --set H=10 overlap_forward=true --carrier deferred" \
              "--algo dreamddp --set H=10 merge_delay=1 --carrier step"
# DeAR's own host work (its per-group copies, steps and zeroing), at make bench's bucket sizes:
# what the simulator does not charge beyond the step it moves (results/simulator/README.md);
# then DreamDDP on a fast link's schedule (comm/backward 0.1: most units synced every iteration,
# each its own collective), results/simulator_fast/README.md's regime
DEAR_PHASES := --algo dear --carrier deferred
engine-phases: venv ## the engine's own cost by phase (an algorithm on a one-process group against the bare model; one core) -> results/bench/engine_phases.md (~15 min)
	rm -f $(PHASES_MD).tmp
	for run in $(PHASE_RUNS); do \
	  $(PY) runners/engine_phases.py --model resnet18 --size compute --batch 8 --iterations 200 $$run --out $(PHASES_MD).tmp || exit 1; \
	  $(PY) runners/engine_phases.py --model gpt2 --size compute --batch 8 --block 128 --iterations 100 $$run --out $(PHASES_MD).tmp || exit 1; \
	done
	$(PY) runners/engine_phases.py --model resnet50 --size paper --batch 4 --iterations 60 --out $(PHASES_MD).tmp
	$(PY) runners/engine_phases.py --model resnet18 --size compute --batch 8 --iterations 200 $(DEAR_PHASES) --set bucket_mb=9.8 --out $(PHASES_MD).tmp
	$(PY) runners/engine_phases.py --model gpt2 --size compute --batch 8 --block 128 --iterations 100 $(DEAR_PHASES) --set bucket_mb=0.78 --out $(PHASES_MD).tmp
	$(PY) runners/engine_phases.py --model resnet18 --size compute --batch 8 --iterations 200 --algo dreamddp --set H=10 --ratio 0.1 --carrier deferred --out $(PHASES_MD).tmp
	mv $(PHASES_MD).tmp $(PHASES_MD)

figures: venv ## tables + figures under results/ from the committed run records (results/runs)
	$(PY) -m dreamddp.results figures --runs $(RUNS) --out $(RESULTS)
	@$(MAKE) --no-print-directory scheduler-reference

# The authors' profiles live outside the repository (shared/reference/...); skip quietly without them.
scheduler-reference: venv ## scheduler vs optimum on the authors' A6000 ResNet-18 profile -> results/scheduler
	@if $(PY) -c "from dreamddp.schedule.compare import reference_root as r; r()" 2>/dev/null; then \
	  $(PY) runners/scheduler_vs_optimum.py --out $(RESULTS)/scheduler; \
	else echo "scheduler-reference: reference profiles not found (DREAMDDP_REFERENCE_PROFILES); kept $(RESULTS)/scheduler"; fi

paper-cpu: venv ## run the CPU-scale studies (skips completed runs), collect them, then make figures
	@start=$$(date +%s); \
	for study in $(CPU_STUDIES); do \
	  echo "== $$study"; \
	  $(OFFLINE) WANDB_MODE=$(SWEEP_WANDB) $(PY) runners/sweep.py experiment=$$study $(SWEEP_ARGS) || exit $$?; \
	done; \
	$(PY) -m dreamddp.results collect --runs $(addprefix multirun/,$(CPU_STUDIES)) --out $(RUNS) || exit $$?; \
	echo "paper-cpu: studies took $$(( $$(date +%s) - start )) s"
	@$(MAKE) --no-print-directory figures

results-wandb: venv ## log the speedup tables of results/runs as W&B Tables (offline, under multirun/wandb-summary)
	$(PY) -m dreamddp.results wandb --runs $(RUNS) --dir multirun/wandb-summary --mode offline

GPU_OUT ?= gpu_out

gpu: venv ## on a machine with a GPU: the measurements of results/gpu (CUDA tests, profiles, every algorithm) -> gpu_out/, or GPU_OUT=dir (~10 min)
	OUT=$(GPU_OUT) PY=$(PY) bash runners/gpu_run.sh

gpu-reports: venv ## results/gpu's reports again from its committed records (no GPU needed)
	for r in results/gpu/*/*/runs; do $(PY) runners/bench_report.py $$(dirname $$r) || exit 1; done
	for m in gpt2 llama2; do $(PY) runners/gpu_profiles.py --model $$m --ours fp32=results/gpu/profiles/$${m}_highest/profile \
	  tf32=results/gpu/profiles/$${m}_high/profile --authors ../shared/reference/official-profiles/paper-v1/H100/$$m \
	  --out results/gpu >/dev/null; done
	$(PY) runners/gpu_summary.py
	$(PY) runners/gpu_host_lead.py
