#!/usr/bin/env bash
# Everything results/gpu/ holds, measured on one lent GPU in one call, in priority order
# under a deadline (a step that would not finish in time is skipped, and what ran comes back):
#   1. the device and versions;  2. the CUDA test module (tests/test_cuda_timing.py);
#   3. start-up profiles of GPT-2 124M and Llama-2 (paper presets), one worker, fp32 and TF32;
#   4. make bench's segments (every algorithm, engine overhead, memory) with 2 workers sharing
#      the GPU over gloo, comm/backward 7, H=10, TF32: GPT-2 and ResNet-18 timed, Llama-2 and
#      ResNet-50 run side by side (every algorithm, Llama's memory), then GPT-2 and ResNet-18
#      repetitions 2 and 3;  5. DDP against ASC-WFBP on the ideal link;  6. one worker alone on
#      the GPU: nosync against plain;  7. the engine's own cost by phase (runners/engine_phases.py,
#      one process, no data pipeline): bitwise with deterministic kernels, DreamDDP's host work by
#      operator (torch.profiler), its variants on GPT-2;  8. overlap_forward's
#      own plan against DreamDDP's schedule under overlap, GPT-2, one iteration per turn.
# Run from the repository root after runners/gpu_pack.sh, on the device (carrying .gpu_carry):
#   OUT=/some/dir BUDGET_S=520 runners/gpu_run.sh
# Results: $OUT/summary.txt, $OUT/env.txt, $OUT/cuda_tests.log, $OUT/gpu.tgz (run records,
# profiles, logs).  SMOKE=1 runs the same steps on this host's CPU with tiny models (a check
# of the script, not a measurement).
set -u
OUT=${OUT:?set OUT}
W=${WORK:-/tmp/dreamddp_gpu}
[ "${RESUME:-0}" = 1 ] || rm -rf "$W"
mkdir -p "$W" "$OUT"
deadline=$(( $(date +%s) + ${BUDGET_S:-520} ))
root=$(pwd)
# what runners/gpu_pack.sh packed (Hydra and the rest, the texts, the tokenised cache)
[ -f .gpu_carry/pack.tar.xz ] && tar xJf .gpu_carry/pack.tar.xz
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}:$root/.gpu_site"
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1 WANDB_MODE=disabled HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1
PY=${PY:-python3}
if [ "${SMOKE:-0}" = 1 ]; then
  DEV=cpu; PROFILE_SIZE=(model.size=tiny); BENCH_SIZE=(model.size=tiny); ITERS=12; ONE="data.block_size=32"
  SIZE=tiny; SINGLE_ITERS=${SINGLE_ITERS:-12}; PHASE_ITERS=40; BLOCK=32
else
  DEV=cuda; PROFILE_SIZE=(); BENCH_SIZE=(); ITERS=22; ONE=""
  # one worker alone: 20 timed iterations of ResNet-18's 11 ms could not resolve 3% (results/gpu/README.md)
  SIZE=paper; SINGLE_ITERS=${SINGLE_ITERS:-102}; PHASE_ITERS=200; BLOCK=1024
fi

# STEPS: the groups to run, in the order given (default all): tests profiles timed (GPT-2)
# other (Llama-2 at once beside ResNet-50) llama2 (Llama-2 alone, timed) reps (repetitions 2 and 3) ddp (DDP against ASC-WFBP
# and S-SGD) resnet50 (ResNet-50 alone, 3 repetitions) single (one worker: the engine's overhead on an unshared GPU) phases (the engine's
# cost by phase, one process) overlap (overlap_forward's own plan against DreamDDP's); the word
# resnet adds the ResNets to timed, other and reps.
# RESUME=1 keeps $WORK, so a second call on the same warm machine finishes the repetitions a
# first call's deadline cut.
STEPS=" ${STEPS:-tests profiles timed resnet other reps ddp single phases overlap} "
want() { [[ "$STEPS" == *" $1 "* ]]; }

step() {  # step NAME CAP_S CMD...: runs CMD under min(CAP_S, time left), logs to $W/NAME.log
  local name=$1 cap=$2 left t0 rc
  shift 2
  left=$(( deadline - $(date +%s) ))
  [ "$cap" -gt "$left" ] && cap=$left
  if [ "$cap" -lt 20 ]; then echo "$name: skipped (${left}s left)" | tee -a "$OUT/summary.txt"; return; fi
  t0=$(date +%s)
  timeout -k 10 "$cap" "$@" > "$W/$name.log" 2>&1
  rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - t0 ))s (cap ${cap}s)" | tee -a "$OUT/summary.txt"
  tail -n 4 "$W/$name.log" | sed 's/^/    /' | tee -a "$OUT/summary.txt"
}

{ date -u; nvidia-smi 2>&1 | head -20; $PY -c "import sys, torch, transformers
print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)
print('device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# 2. the CUDA test module (skips on the CPU)
group_tests() {
  step cuda_tests 150 $PY -m pytest tests/test_cuda_timing.py -v -s -p no:cacheprovider
  cp "$W/cuda_tests.log" "$OUT/cuda_tests.log"
}

# 3. profiles: one worker, the algorithm's start-up profile saved beside the run record
group_profiles() {
  for model in gpt2 llama2; do
    for prec in highest high; do
      step "profile_${model}_${prec}" 60 $PY -m dreamddp.cli algo=dreamddp model=$model model.size=paper \
        "${PROFILE_SIZE[@]}" $ONE cluster.device=$DEV cluster.nproc=1 train.iterations=4 train.eval_every=0 \
        train.progress=false train.matmul_precision=$prec warmup.profile_iterations=10 wandb.mode=disabled \
        hydra.run.dir="$W/profiles/${model}_${prec}"
    done
  done
}

# 4. the algorithms side by side; records under $W/bench_<name>/runs/<model>/rep<k>/
bench() {  # bench NAME MODEL REPS ITERATIONS [bench.py options...]
  local name=$1 model=$2 reps=$3 iters=$4
  shift 4
  step "bench_${name}_r${reps}" 400 $PY runners/bench.py --preset paper --models "$model" --reps "$reps" --resume \
    --nproc 2 --H 10 --ratio 7 --iterations "$iters" --calibration-iterations 6 --profile-iterations 2 \
    --out "$W/bench_$name" "$@"
}
SET=(--set cluster.device=$DEV train.matmul_precision=high "${BENCH_SIZE[@]}")
# timed, one job at a time: GPT-2 (with per-algorithm memory), ResNet-18
group_timed() {
  bench gpt2 gpt2 1 $ITERS "${SET[@]}" $ONE
  want resnet && bench resnet18 resnet18 1 $ITERS --no-memory "${SET[@]}" data=synthetic
}
# every algorithm on the other two paper models, with Llama's memory; the two models run at
# the same time (their iteration times are not comparisons), Llama's segments in two jobs
# (fourteen 176M-parameter replicas per worker at once would not fit beside ResNet-50)
LLAMA_A=(ssgd ascwfbp dear flsgd plsgd_enp streaming_diloco ddp@ideal)
LLAMA_B=(dreamddp dreamddp+overlap dreamddp+general dreamddp+delay ssgd@ideal nosync@ideal plain@ideal)
group_other() {
  bench llama2_a llama2 1 14 --only "${LLAMA_A[@]}" "${SET[@]}" $ONE &
  bench llama2_b llama2 1 14 --only "${LLAMA_B[@]}" --port 29500 "${SET[@]}" $ONE &
  want resnet && bench resnet50 resnet50 1 14 --no-memory --port 29600 "${SET[@]}" data=synthetic
  wait
}
# Llama-2 alone on the GPU, every algorithm, one repetition (run 2's two halves ran at once,
# four processes on the GPU: no comparisons; its memory came from them)
group_llama2() {
  bench llama2 llama2 1 14 --no-memory "${SET[@]}" $ONE
}
# ResNet-50 alone on the GPU, 3 repetitions (run 1's one ran with the synchronising stamps)
group_resnet50() {
  bench resnet50 resnet50 3 14 --no-memory "${SET[@]}" data=synthetic
}
# the medians: repetitions 2 and 3 (REPS_OPTS adds bench.py options, e.g. --no-memory when a
# machine's time allows three repetitions but not the memory segments again)
# (ResNet-18's first: it is the shorter job, so a deadline cuts GPT-2's, which RESUME=1 finishes)
group_reps() {
  want resnet && bench resnet18 resnet18 3 $ITERS --no-memory "${SET[@]}" data=synthetic
  bench gpt2 gpt2 3 $ITERS ${REPS_OPTS:-} "${SET[@]}" $ONE
}
# DDP against its like for like (ASC-WFBP: buckets all-reduced during backward), and S-SGD against
# its own (DDP with one bucket, all-reduced after backward), ideal link
group_ddp() {
  bench gpt2_ddp gpt2 3 $ITERS --no-memory --only ddp@ideal ddp+1bucket@ideal ssgd@ideal ascwfbp@ideal "${SET[@]}" $ONE
}
# the engine's overhead with the GPU not shared: one worker, nosync against plain, 3 repetitions
# (ResNet-18's first and whatever STEPS says: its 11 ms iteration is the one 20 iterations could not resolve)
group_single() {
  bench resnet18_single resnet18 3 $SINGLE_ITERS --nproc 1 --no-memory --only nosync@ideal plain@ideal \
    "${SET[@]}" data=synthetic
  bench gpt2_single gpt2 3 $SINGLE_ITERS --nproc 1 --no-memory --only nosync@ideal plain@ideal "${SET[@]}" $ONE
}
# where the engine's own cost lies, phase by phase, without the trainer's data pipeline or peers:
# an algorithm on the engine against the bare model in one process (the presets' batches), in
# priority order: the aligned flat buffers against the bare model, bitwise, with deterministic
# kernels (nosync, then DreamDDP); DreamDDP's host work on ResNet-18 by operator (torch.profiler);
# its overlap and delayed merge on GPT-2; ResNet-50 bitwise; DreamDDP's host work on GPT-2; nosync there
group_phases() {
  local spec i=0
  local GPT="gpt2 --batch 4 --block $BLOCK --iterations $((PHASE_ITERS * 3 / 5))"
  for spec in "resnet18 --batch 128 --deterministic" \
      "resnet18 --batch 128 --deterministic --algo dreamddp --set H=10" \
      "resnet18 --batch 128 --host-ops 20 --algo dreamddp --set H=10" \
      "$GPT --algo dreamddp --set H=10 overlap_forward=true" \
      "$GPT --algo dreamddp --set H=10 merge_delay=1" \
      "resnet18 --batch 128 --host-ops 20 --algo dreamddp --set H=10 overlap_forward=true" \
      "resnet50 --batch 128 --deterministic" "$GPT --host-ops 10 --algo dreamddp --set H=10" "$GPT"; do
    set -- $spec
    i=$((i + 1))
    step "phases_${i}_$1" 120 $PY runners/engine_phases.py --size $SIZE --device $DEV --iterations $PHASE_ITERS \
      --out "$OUT/engine_phases.md" --model "$@"
  done
}

# overlap_forward planned for its own deadlines against the same algorithm run on DreamDDP's
# schedule (planned for the end of backward), DreamDDP beside them; one iteration of each per turn
# of the interleaving, where the CPU's window-by-window turns could not resolve the modelled 2-6%
# (results/bench_overlap_plan_chunk1), and the compute-only runs for the bounds; OVERLAP_REPS repetitions (default 5)
group_overlap() {
  bench gpt2_overlap_plan gpt2 "${OVERLAP_REPS:-5}" $ITERS --chunk 1 --no-memory \
    --only dreamddp dreamddp+overlap+same-schedule dreamddp+overlap nosync@ideal plain@ideal "${SET[@]}" $ONE
}

for g in $STEPS; do
  [ "$g" = resnet ] && continue
  if declare -F "group_$g" > /dev/null; then "group_$g"; else echo "gpu_run: unknown step $g" | tee -a "$OUT/summary.txt"; fi
done

tar czf "$OUT/gpu.tgz" -C "$W" --exclude='*.pt' --exclude='checkpoints' . 2>/dev/null
ls -la "$OUT"
