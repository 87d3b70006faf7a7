"""Where the engine's own cost lies: nosync on the engine against the bare model, by phase.

One process, one device, no data pipeline and no process group: two replicas of
a model preset from the same seed, one behind the partial-sync engine with
nothing to sync (flat buffers, gradient-ready hooks, per-iteration books), one
behind the passthrough (no engine), train on the same synthetic batches in
alternating chunks, so both sample the same slow and fast spells of the host.
Each phase (begin: zeroing and books; forward; backward: the hooks run here;
end of backward; step; after step) is timed with the device clock the trainer
uses (on CUDA a synchronisation at each boundary, as the trainer's stamps).
Prints each phase's median per engine and their difference, and checks that
both replicas trained to the same parameters (the comparison is like for like).

    python runners/engine_phases.py --model resnet50 --size paper --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from dreamddp.algorithms.nosync import NoSync
from dreamddp.clock import clock_for
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.passthrough import PassthroughEngine
from dreamddp.engine.units import enumerate_units
from dreamddp.models import MODELS, build_model
from dreamddp.models.tasks import compute_loss

TITLE = "# The engine's own cost by phase (nosync on the engine against the bare model)"
PHASES = ("begin", "forward", "backward", "end_backward", "step", "after_step")


def _batches(task: str, model, n: int, batch: int, block: int, device) -> list:
    g = torch.Generator().manual_seed(0)
    if task == "image":
        classes = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1].out_features
        return [(torch.randn(batch, 3, 32, 32, generator=g).to(device),
                 torch.randint(0, classes, (batch,), generator=g).to(device)) for _ in range(n)]
    vocab = model.config.vocab_size
    return [torch.randint(0, vocab, (batch, block), generator=g).to(device) for _ in range(n)]


def measure(model_name: str, size: str, device: str, iterations: int, chunk: int, batch: int, block: int) -> dict:
    """{"engine": {phase: [s, ...]}, "plain": {...}, "same_parameters": bool}."""
    dev = torch.device(device)
    task = MODELS[model_name].task
    replicas = []
    for _ in range(2):
        torch.manual_seed(0)
        replicas.append(build_model(model_name, size).to(dev))
    batches = _batches(task, replicas[0], chunk, batch, block, dev)
    engines = {
        "engine": PartialSyncEngine(replicas[0], enumerate_units(replicas[0]), FakeCommunicator(1, 0),
                                    NoSync(NoSync.Config(name="nosync"))),
        "plain": PassthroughEngine(replicas[1], enumerate_units(replicas[1]), 0),
    }
    optims = {k: torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9) for k, m in zip(engines, replicas)}
    models = dict(zip(engines, replicas))
    clock = clock_for(dev)
    times: dict = {k: {p: [] for p in PHASES} for k in engines}
    t = 0
    while t < iterations:
        for key, engine in engines.items():
            for i in range(chunk):
                torch.manual_seed(t + i)  # the same dropout masks in both replicas
                stamps = [clock()]
                engine.begin_iteration(t + i)
                stamps.append(clock())
                loss = compute_loss(task, models[key], batches[i])
                stamps.append(clock())
                loss.backward()
                stamps.append(clock())
                engine.end_backward()
                stamps.append(clock())
                engine.step(optims[key], 0.0)
                stamps.append(clock())
                engine.after_step()
                stamps.append(clock())
                for phase, a, b in zip(PHASES, stamps, stamps[1:]):
                    times[key][phase].append(b - a)
        t += chunk
    same = all(torch.equal(a, b) for a, b in zip(replicas[0].parameters(), replicas[1].parameters()))
    return {**times, "same_parameters": same}


def report(times: dict, warmup: int) -> list[str]:
    lines = ["| phase | engine, nosync (ms) | plain (ms) | difference (ms) |", "|---|---|---|---|"]
    total = {"engine": 0.0, "plain": 0.0}
    for phase in PHASES:
        med = {k: statistics.median(times[k][phase][warmup:]) * 1e3 for k in total}
        for k in total:
            total[k] += med[k]
        lines.append(f"| {phase} | {med['engine']:.3f} | {med['plain']:.3f} | {med['engine'] - med['plain']:+.3f} |")
    lines.append(f"| sum of medians | {total['engine']:.3f} | {total['plain']:.3f} | "
                 f"{total['engine'] - total['plain']:+.3f} ({total['engine'] / total['plain']:.3f} x) |")
    return lines


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
    p.add_argument("--out", help="append the section to this markdown file (a title first when it is new)")
    args = p.parse_args(argv)
    if args.iterations < 2 * args.chunk or args.chunk < 1:
        p.error("--iterations must be at least two chunks, --chunk at least 1")
    torch.set_num_threads(args.threads)
    times = measure(args.model, args.size, args.device, args.iterations, args.chunk, args.batch, args.block)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu, {args.threads} thread(s)"
    given = list(sys.argv[1:] if argv is None else argv)
    if "--out" in given:  # where the section goes is not how it was measured
        del given[given.index("--out"):given.index("--out") + 2]
    lines = [f"## {args.model}/{args.size} on {where}", "",
             f"Made by `python runners/engine_phases.py {' '.join(given)}`: batch "
             f"{args.batch}" + (f" x {args.block} tokens" if MODELS[args.model].task == "lm" else "")
             + f", {args.iterations} iterations per engine in alternating chunks of {args.chunk} (the first chunk "
             "of each not counted); medians per phase.", "",
             *report(times, args.chunk), "",
             f"Same parameters after training: {'yes' if times['same_parameters'] else 'NO'}.", ""]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        title = [] if out.exists() else [TITLE, "", __doc__.split("\n\n")[1].replace("\n", " "), ""]
        with out.open("a") as f:
            f.write("\n".join(title + lines) + "\n")
    return 0 if times["same_parameters"] else 1


if __name__ == "__main__":
    sys.exit(main())
