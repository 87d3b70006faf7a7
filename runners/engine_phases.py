"""Where the engine's own cost lies: an algorithm on the engine against the bare model, by phase.

One process, one device, no data pipeline and no peers: two replicas of a
model preset from the same seed, one behind the partial-sync engine running
an algorithm (default nosync: nothing to sync; flat buffers, gradient-ready
hooks, per-iteration books) through the real communicator on a one-process
gloo group (nothing crosses a wire, the ideal link paces nothing, and the
average over one replica is the replica itself), one behind the passthrough
(no engine), train on the same synthetic batches in alternating chunks, so
both sample the same slow and fast spells of the host.  What differs is the
algorithm's own host-side work (its launches, copies, merges and split
optimizer steps, and the backend's call on one process), never a wait for a
peer.  A plan that needs a profile (DreamDDP's schedule) is made on a
synthetic one: each unit's backward in proportion to its parameters, the
all-reduce of all of them ``--ratio`` x the backward.  Each phase (begin:
zeroing and books; forward; backward: the hooks run here; end of backward;
step; after step) is timed with the device clock the trainer uses (on CUDA a
synchronisation at each boundary, as the trainer's stamps).  Prints each
phase's median per engine and their difference, and checks that both
replicas trained to the same parameters, bitwise (the comparison is like for
like; on CUDA only with ``--deterministic`` kernels, else it prints the largest difference).
``--host-ops N`` then runs N more iterations of each under torch.profiler and
prints the operators whose host time differs most (on CUDA with the runtime's
launches, copies and synchronisations; a gradient hook's Python counts as its
AccumulateGrad node's own time).  ``--carrier`` says when the real collectives
start: eager (the default) at launch, so the backend's call on one process
runs inside backward; deferred as the CPU benchmark's emulated link carries
them, queued at launch and started at the first wait (a DreamDDP launch in
backward then costs only its books).

    python runners/engine_phases.py --model resnet18 --size compute --batch 8 --algo dreamddp --set H=10 --carrier deferred
    python runners/engine_phases.py --model resnet50 --size paper --device cuda
    python runners/engine_phases.py --model resnet18 --size paper --device cuda --deterministic
    python runners/engine_phases.py --algo dreamddp --set overlap_forward=true
    python runners/engine_phases.py --model resnet18 --size paper --device cuda --batch 128 --algo dreamddp --set H=10 --host-ops 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

from dreamddp.algorithms import ALGORITHMS, build_algorithm
from dreamddp.algorithms.base import Algorithm
from dreamddp.checks import ConfigError
from dreamddp.clock import clock_for
from dreamddp.comm.communicator import Communicator
from dreamddp.comm.cost import CARRIERS
from dreamddp.data import synthetic
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.passthrough import PassthroughEngine
from dreamddp.engine.units import enumerate_units
from dreamddp.models import MODELS, build_model
from dreamddp.models.tasks import compute_loss
from dreamddp.schedule.profile import Profile

TITLE = "# The engine's own cost by phase (an algorithm on the engine, one process, against the bare model)"
# Where one replica does NOT train as local SGD would, so the parameters are not compared:
NOT_LOCAL_SGD = {"streaming_diloco": "its outer optimizer steps the averaged fragments"}
PHASES = ("begin", "forward", "backward", "end_backward", "step", "after_step")


def synthetic_batches(task: str, model, n: int, batch: int, block: int, device) -> list:
    """``n`` batches of the synthetic dataset (data=synthetic's generator), on ``device``."""
    if task == "image":
        classes = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1].out_features
        splits = synthetic.images(n * batch, 0, classes)
        return [(x.to(device), y.to(device)) for x, y in zip(splits.train_x.split(batch), splits.train_y.split(batch))]
    ids = torch.from_numpy(synthetic.tokens(n * batch, 0, block, model.config.vocab_size).train)
    return list(ids.view(n, batch, block).to(device))


def algorithm_config(name: str, overrides: dict):
    """The algorithm's own Config with ``overrides`` (an unknown name or key: one-line error)."""
    try:
        cls = ALGORITHMS.lookup(name)
    except ConfigError as e:
        raise SystemExit(f"error: --algo: {e}") from None
    if cls.make_engine.__func__ is not Algorithm.make_engine.__func__:
        raise SystemExit(f"error: --algo {name}: runs without the partial-sync engine (nothing to compare)")
    fields = cls.Config.__dataclass_fields__
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise SystemExit(f"error: --set {unknown[0]}: not a field of algo={name} ({', '.join(sorted(fields))})")
    cfg = cls.Config(name=name, **overrides)
    try:
        cls.check(cfg)
    except ConfigError as e:
        raise SystemExit(f"error: --set {e}") from None
    return cfg


def synthetic_profile(units, ratio: float) -> Profile:
    """Backward in proportion to parameters (1 s in all), the all-reduce of all of them ``ratio`` s."""
    total = sum(u.numel for u in units)
    names = [u.name for u in units]
    share = {u.name: u.numel / total for u in units}
    return Profile(units=names, bp=dict(share), comm={n: ratio * share[n] for n in names},
                   fwd={n: share[n] / 2 for n in names}, nbytes={u.name: u.nbytes for u in units})


def measure(model_name: str, size: str, device: str, iterations: int, chunk: int, batch: int, block: int,
            cfg, ratio: float = 7.0, profiled: int = 0, carrier: str = "eager") -> dict:
    """{"engine": {phase: [s, ...]}, "plain": {...}, "same_parameters": bool, "largest_difference":
    float}, with "host_ops" (``host_ops``) when ``profiled`` iterations more run under the
    profiler; ``cfg``: the algorithm's Config, checked (``algorithm_config``); ``carrier``: when the
    real collectives start (``bandwidth.carrier``: eager at launch, deferred at the first wait)."""
    dev = torch.device(device)
    task = MODELS[model_name].task
    replicas = []
    for _ in range(2):
        torch.manual_seed(0)
        replicas.append(build_model(model_name, size).to(dev))
    batches = synthetic_batches(task, replicas[0], chunk, batch, block, dev)
    # the units in the order their gradients become ready, as the trainer measures it
    units = [enumerate_units(m, lambda m=m: compute_loss(task, m, batches[0])) for m in replicas]
    algorithm = build_algorithm(cfg, ALGORITHMS.lookup(cfg.name).setup_from_profile(cfg, synthetic_profile(units[0], ratio)))
    own_group = not dist.is_initialized()
    if own_group:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        engines = {
            "engine": PartialSyncEngine(replicas[0], units[0], Communicator(carrier=carrier), algorithm),
            "plain": PassthroughEngine(replicas[1], units[1], 0),
        }
        runs = {key: (engine, model, torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))
                for (key, engine), model in zip(engines.items(), replicas)}
        clock = clock_for(dev)
        times = _alternate(runs, task, batches, clock, iterations, chunk)
        if profiled:
            times["host_ops"] = host_ops(runs, task, batches, clock, iterations, profiled, dev.type == "cuda")
        engines["engine"].flush()  # what is still deferred (overlap_forward's steps) lands
    finally:
        if own_group:
            dist.destroy_process_group()
    pairs = list(zip(replicas[0].parameters(), replicas[1].parameters()))
    same = all(torch.equal(a, b) for a, b in pairs)
    # relative to each tensor's largest magnitude: what a CUDA run, not bitwise reproducible, shows
    largest = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in pairs)
    return {**times, "same_parameters": same, "largest_difference": largest}


def _alternate(runs: dict, task: str, batches: list, clock, iterations: int, chunk: int) -> dict:
    """Each run ``chunk`` iterations per turn until ``iterations``; {run: {phase: [s, ...]}}."""
    times: dict = {k: {p: [] for p in PHASES} for k in runs}
    for t in range(0, iterations, chunk):
        for key, run in runs.items():
            for i in range(chunk):
                stamps = _iteration(run, task, batches[i], t + i, clock)
                for phase, a, b in zip(PHASES, stamps, stamps[1:]):
                    times[key][phase].append(b - a)
    return times


def _iteration(run: tuple, task: str, batch, step: int, clock) -> list[float]:
    """One training iteration of ``run`` (engine, model, optimizer); the clock at each phase boundary."""
    engine, model, optimizer = run
    torch.manual_seed(step)  # the same dropout masks in both replicas
    stamps = [clock()]
    engine.begin_iteration(step)
    stamps.append(clock())
    loss = compute_loss(task, model, batch)
    stamps.append(clock())
    loss.backward()
    stamps.append(clock())
    engine.end_backward()
    stamps.append(clock())
    engine.step(optimizer)
    stamps.append(clock())
    engine.after_step()
    stamps.append(clock())
    return stamps


def host_ops(runs: dict, task: str, batches: list, clock, first: int, iterations: int, on_cuda: bool) -> dict:
    """Each run's host time by operator over ``iterations`` more iterations under torch.profiler
    (every thread: the autograd thread that runs the gradient hooks on CUDA among them; on CUDA
    also the runtime's calls, launches, copies and synchronisations): {run: {op: (self host
    seconds per iteration, calls per iteration)}}.  The two runs continue the same steps
    (``first`` on), so the replicas still train alike."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    out = {}
    for key, run in runs.items():
        with profile(activities=activities) as prof:
            for i in range(iterations):
                _iteration(run, task, batches[i % len(batches)], first + i, clock)
        out[key] = {e.key: (e.self_cpu_time_total * 1e-6 / iterations, e.count / iterations)
                    for e in prof.key_averages()}
    return out


def host_ops_report(ops: dict, rows: int = 14) -> list[str]:
    """The operators whose host time differs most between the engine and the bare model."""
    names = set(ops["engine"]) | set(ops["plain"])
    none = (0.0, 0.0)
    diff = {n: ops["engine"].get(n, none)[0] - ops["plain"].get(n, none)[0] for n in names}
    lines = ["| operator (self host time) | engine (ms, calls) per iteration | plain (ms, calls) per iteration "
             "| difference (ms) |", "|---|---|---|---|"]
    for n in sorted(names, key=lambda n: -abs(diff[n]))[:rows]:
        e, b = ops["engine"].get(n, none), ops["plain"].get(n, none)
        lines.append(f"| `{n}` | {e[0] * 1e3:.3f} ({e[1]:g}) | {b[0] * 1e3:.3f} ({b[1]:g}) | {diff[n] * 1e3:+.3f} |")
    total = {k: sum(t for t, _ in ops[k].values()) for k in ("engine", "plain")}
    lines.append(f"| every operator | {total['engine'] * 1e3:.3f} | {total['plain'] * 1e3:.3f} | "
                 f"{(total['engine'] - total['plain']) * 1e3:+.3f} |")
    return lines


def report(times: dict, warmup: int, label: str = "nosync") -> list[str]:
    lines = [f"| phase | engine, {label} (ms) | plain (ms) | difference (ms) |", "|---|---|---|---|"]
    total = {"engine": 0.0, "plain": 0.0}
    for phase in PHASES:
        med = {k: statistics.median(times[k][phase][warmup:]) * 1e3 for k in total}
        for k in total:
            total[k] += med[k]
        lines.append(f"| {phase} | {med['engine']:.3f} | {med['plain']:.3f} | {med['engine'] - med['plain']:+.3f} |")
    lines.append(f"| sum of medians | {total['engine']:.3f} | {total['plain']:.3f} | "
                 f"{total['engine'] - total['plain']:+.3f} ({total['engine'] / total['plain']:.3f} x) |")
    return lines


def deterministic_kernels() -> None:
    """CUDA kernels that repeat bitwise (cuBLAS's workspace fixed, cuDNN's choice fixed), so that
    on CUDA too the two replicas must match; an op without a deterministic kernel warns."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read at cuBLAS's first use
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def same_line(algo: str, same: bool, largest: float, on_cuda: bool, deterministic: bool = False) -> str:
    if algo in NOT_LOCAL_SGD:
        return f"Parameters not compared: {NOT_LOCAL_SGD[algo]}."
    if on_cuda and deterministic:
        return (f"Same parameters after training: {'yes' if same else 'NO'} (deterministic kernels; largest "
                f"difference {largest:.2e} of a tensor's largest magnitude).")
    if on_cuda:
        # on an H200 the replicas of ResNet-18 and ResNet-50 came out not bitwise alike with nosync;
        # CUDA kernels (cuDNN's among them) need not repeat bitwise, so the difference is printed
        return (f"Parameters after training: {'bitwise the same' if same else 'not bitwise the same'}, largest "
                f"difference {largest:.2e} of a tensor's largest magnitude (not a check on CUDA, whose kernels "
                "need not repeat bitwise; on the CPU the replicas must match bitwise).")
    return f"Same parameters after training: {'yes' if same else 'NO'}."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet18", choices=sorted(MODELS))
    p.add_argument("--size", default="paper", help="model.size preset")
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--iterations", type=int, default=200, help="per engine, in alternating chunks")
    p.add_argument("--chunk", type=int, default=10, help="iterations of one engine per turn")
    p.add_argument("--batch", type=int, default=32, help="samples per iteration (32x32 images or token rows)")
    p.add_argument("--block", type=int, default=128, help="tokens per row (language models)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    p.add_argument("--algo", default="nosync", help="an algorithm that runs on the engine")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="its algo.* options, e.g. H=10")
    p.add_argument("--ratio", type=float, default=7.0, help="all-reduce / backward of the synthetic profile")
    p.add_argument("--out", help="append the section to this markdown file (a title first when it is new)")
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic CUDA kernels: the replicas must then match bitwise on CUDA too")
    p.add_argument("--carrier", default="eager", choices=CARRIERS,
                   help="when the real collectives start (bandwidth.carrier): at launch, at the first wait (as the "
                        "CPU benchmark's emulated link carries them: the launches in backward then queue only), or "
                        "also as an iteration ends (step)")
    p.add_argument("--host-ops", type=int, default=0, metavar="N",
                   help="then N more iterations of each under torch.profiler: host time by operator")
    args = p.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq:
            p.error(f"--set {item}: expected KEY=VALUE")
        overrides[key] = yaml.safe_load(value)
    if args.iterations < 2 * args.chunk or args.chunk < 1 or args.host_ops < 0:
        p.error("--iterations must be at least two chunks, --chunk at least 1, --host-ops not negative")
    torch.set_num_threads(args.threads)
    if args.deterministic:
        deterministic_kernels()
    cfg = algorithm_config(args.algo, overrides)  # a bad --algo or --set stops here, before any model is built
    times = measure(args.model, args.size, args.device, args.iterations, args.chunk, args.batch, args.block,
                    cfg, args.ratio, args.host_ops, args.carrier)
    label = ALGORITHMS.lookup(args.algo).variant({"name": args.algo, **overrides})
    on_cuda = torch.device(args.device).type == "cuda"
    where = torch.cuda.get_device_name() if on_cuda else f"cpu, {args.threads} thread(s)"
    given = list(sys.argv[1:] if argv is None else argv)
    if "--out" in given:  # where the section goes is not how it was measured
        del given[given.index("--out"):given.index("--out") + 2]
    lines = [f"## {label}: {args.model}/{args.size} on {where}", "",
             f"Made by `python runners/engine_phases.py {' '.join(given)}`: batch "
             f"{args.batch}" + (f" x {args.block} tokens" if MODELS[args.model].task == "lm" else "")
             + f", {args.iterations} iterations per engine in alternating chunks of {args.chunk} (the first chunk "
             "of each not counted); medians per phase.", "",
             *report(times, args.chunk, label), "",
             *([f"Host time by operator, {args.host_ops} more iterations of each under torch.profiler (its own "
                "cost in both; the Python between operators not counted):", "",
                *host_ops_report(times["host_ops"]), ""] if args.host_ops else []),
             same_line(args.algo, times["same_parameters"], times["largest_difference"], on_cuda,
                       args.deterministic), ""]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        title = [] if out.exists() else [TITLE, "", __doc__.split("\n\n")[1].replace("\n", " "), ""]
        with out.open("a") as f:
            f.write("\n".join(title + lines) + "\n")
    checked = args.algo not in NOT_LOCAL_SGD and (args.deterministic or not on_cuda)
    return 1 if checked and not times["same_parameters"] else 0


if __name__ == "__main__":
    sys.exit(main())
