"""Is a preset in the paper's compute regime?  Its forward / backward / optimizer split, measured.

Trains each model's preset with ``algo=nosync`` (no traffic) on 2 workers, one
per core, and reads the split from the run record: forward, backward, and
the rest of the iteration (the optimizer step, clipping and the engine's
bookkeeping).  The regime the DreamDDP paper's GPUs run in: backward about
twice forward (within 20%: 1.6 to 2.4) and the step under 15% of backward.
Writes ``<out>/compute_split.md``; the numbers are quoted beside each preset
in conf/model/*.yaml.

    python runners/compute_split.py                       # every model, model.size=compute
    python runners/compute_split.py --models gpt2 --set model.n_embd=256   # try a candidate
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from benchlib import run_training

from dreamddp.atomic import write_text
from dreamddp.run.summary import warmup_cut

TARGET_RATIO, RATIO_TOLERANCE, STEP_SHARE = 2.0, 0.2, 0.15


def split(rec: dict) -> dict:
    rows = rec["iterations"][warmup_cut(len(rec["iterations"])):]
    med = lambda f: statistics.median(f(r) for r in rows)  # noqa: E731
    fwd, bwd = med(lambda r: r["forward"]), med(lambda r: r["backward"])
    step = med(lambda r: r["time"] - r["forward"] - r["backward"] - r["wait"])
    model = rec["extra"].get("model", {})
    return {"forward_ms": 1e3 * fwd, "backward_ms": 1e3 * bwd, "step_ms": 1e3 * step, "bwd_over_fwd": bwd / fwd,
            "step_over_bwd": step / bwd, "parameters_M": model.get("parameters", 0) / 1e6,
            "edge_share": model.get("edge_share")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["gpt2", "resnet18", "llama2", "resnet50"])
    p.add_argument("--size", default="compute")
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides for every run")
    p.add_argument("--out", default="results/bench")
    args = p.parse_args(argv)
    rows, start = [], time.perf_counter()
    for model in args.models:
        rec = run_training(os.path.join(args.out, "compute_split_runs", model),
                           [f"model={model}", f"model.size={args.size}", "algo=nosync", "bandwidth=ideal",
                            "cluster.nproc=2", f"train.iterations={args.iterations}", "train.eval_every=0",
                            "wandb.mode=disabled", *args.set], label=model)
        row = {"model": model, **split(rec)}
        row["in_regime"] = (abs(row["bwd_over_fwd"] / TARGET_RATIO - 1) <= RATIO_TOLERANCE
                            and row["step_over_bwd"] < STEP_SHARE)
        rows.append(row)
        print(f"{model}: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in row.items() if k != "model"), flush=True)
    lines = [f"# Compute split of `model.size={args.size}` (`python runners/compute_split.py`)", "",
             f"`algo=nosync`, 2 workers (one per core), {args.iterations} iterations, medians over the timed ones "
             f"({time.perf_counter() - start:.0f} s). The paper's regime: backward / forward within "
             f"{RATIO_TOLERANCE:.0%} of {TARGET_RATIO:g} and the step under {STEP_SHARE:.0%} of backward."
             + (f" Overrides: `{' '.join(args.set)}`." if args.set else ""), "",
             "| model | parameters (M) | embeddings/head share | forward ms | backward ms | step ms | "
             "backward / forward | step / backward | in the regime |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        share = "n/a" if r["edge_share"] is None else f"{r['edge_share']:.1%}"
        lines.append(f"| {r['model']} | {r['parameters_M']:.2f} | {share} | {r['forward_ms']:.1f} | "
                     f"{r['backward_ms']:.1f} | {r['step_ms']:.1f} | {r['bwd_over_fwd']:.2f} | "
                     f"{r['step_over_bwd']:.2f} | {'yes' if r['in_regime'] else 'NO'} |")
    write_text(os.path.join(args.out, "compute_split.md"), "\n".join(lines) + "\n")
    print(f"{args.out}/compute_split.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
