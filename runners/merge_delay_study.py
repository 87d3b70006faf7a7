"""What the delayed merge costs in quality: ``results/merge_delay/README.md``.

Runs ``experiment=merge_delay_cpu`` (DreamDDP at ``algo.merge_delay`` 0, 1, 2 x
3 seeds, 300 iterations, H = 10, 2 workers) on the compute-regime GPT-2 and
ResNet-18, each at a fixed emulated rate where the all-reduce of all
parameters takes about 7x its backward pass, then tabulates, per model and
delay, at equal iterations: the final training loss (mean of the last 10
iterations), the final evaluation loss, both over DreamDDP's (merge_delay=0,
same seed), the mean iteration time and the time to a fixed loss target (the
highest final smoothed training loss of any run of the model, so every run
reaches it; results/target.py), and plots the parameter divergence across
workers next to DreamDDP's.

    python runners/merge_delay_study.py               # run the sweeps, then the report
    python runners/merge_delay_study.py --report-only # from results/merge_delay/runs
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dreamddp.atomic import write_csv, write_text  # noqa: E402
from dreamddp.prediction import record_link  # noqa: E402
from dreamddp.results.collect import collect, write_compact  # noqa: E402
from dreamddp.results.spread import fmt_spread, median_spread  # noqa: E402
from dreamddp.results.target import time_to_target, train_loss_points  # noqa: E402

# Per model: the emulated rate (Gbit/s) at which the all-reduce of all parameters takes about
# 7x the backward pass on 2 workers (compute presets: GPT-2 15.5 MB, ~0.17 s backward;
# ResNet-18 17.5 MB, ~0.07 s backward; runners/compute_split.py).
RATES = {"gpt2": 0.1, "resnet18": 0.3}
# Per model, overrides of the study's evaluation: a ResNet-18 evaluation batch is 8 images, so the
# preset's 4 batches (32 images) move the eval loss by 10-30% from one model to the next; 64
# batches (512 images) make a 1% comparison readable.  GPT-2's 4 batches are 4,096 tokens.
EVAL = {"gpt2": [], "resnet18": ["data.eval_batches=64"]}


def sweep(model: str, gbps: float, extra: list[str]) -> None:
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "sweep.py"),
           "experiment=merge_delay_cpu", f"model={model}", f"bandwidth.gbps={gbps}", "wandb.mode=disabled", *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    if subprocess.run(cmd, env=env).returncode != 0:
        raise SystemExit(f"merge_delay_study: the {model} sweep failed")


def _final_loss(run: dict) -> float:
    return statistics.fmean(r["loss"] for r in run["iterations"][-10:])


def _eval_loss(run: dict) -> float | None:
    return run["evals"][-1].get("loss") if run["evals"] else None


def report(runs: list[dict], out: Path, seconds: float | None) -> None:
    by: dict = defaultdict(dict)  # model -> (delay, seed) -> run
    for run in runs:
        c = run["config"]
        by[c["model"]["name"]][(int(c["algo"]["merge_delay"]), int(c["seed"]))] = run
    lines = ["# DreamDDP with a delayed merge: quality and time", "",
             "Made by `python runners/merge_delay_study.py`" + (f" ({seconds / 60:.0f} min of runs on this host)" if seconds else "")
             + ": DreamDDP at `algo.merge_delay` 0 (the paper's), 1 and 2, three seeds each, 300 iterations, "
             "H=10, 2 workers, compute-regime presets, an emulated link at a fixed rate per model (chosen for an "
             "all-reduce of all parameters about 7x the backward pass; the ratio as measured is given per model). Ratios are over merge_delay=0 with the same seed; medians over "
             "seeds with the min-max spread. Time to target: training seconds until the training loss (mean of "
             "the last 10 iterations) first reaches the highest final value of any run of the model.", ""]
    rows = []
    for model, runs_of in sorted(by.items()):
        curves = {k: train_loss_points(r["iterations"]) for k, r in runs_of.items()}
        target = max(points[-1][1] for points in curves.values())
        lines += [f"## {model}", "", f"{_regime_line(runs_of)} {_link_line(runs_of)} Target training loss {target:.4f}.", "",
                  "| merge_delay | final train loss | x delay 0 | final eval loss | x delay 0 | iteration s | "
                  "time to target s | x delay 0 |", "|---|---|---|---|---|---|---|---|"]
        for delay in sorted({d for d, _ in runs_of}):
            seeds = sorted(s for d, s in runs_of if d == delay)
            vals = defaultdict(list)
            for seed in seeds:
                run, base = runs_of[(delay, seed)], runs_of.get((0, seed))
                ttt = time_to_target(curves[(delay, seed)], target)
                vals["train"].append(_final_loss(run))
                vals["eval"].append(_eval_loss(run))
                vals["time"].append(run["summary"]["mean_iteration_time"])
                vals["ttt"].append(ttt)
                if base is not None:
                    vals["train_x"].append(_final_loss(run) / _final_loss(base))
                    if _eval_loss(run) and _eval_loss(base):
                        vals["eval_x"].append(_eval_loss(run) / _eval_loss(base))
                    base_ttt = time_to_target(curves[(0, seed)], target)
                    if ttt and base_ttt:
                        vals["ttt_x"].append(ttt / base_ttt)
            med = {k: median_spread(v) for k, v in vals.items()}
            rows.append({"model": model, "merge_delay": delay, **{k: (v[0] if v else None) for k, v in med.items()}})
            lines.append(f"| {delay} | {fmt_spread(med['train'], 4)} | {fmt_spread(med.get('train_x'), 4)} | {fmt_spread(med['eval'], 4)} | "
                         f"{fmt_spread(med.get('eval_x'), 4)} | {fmt_spread(med['time'], 3)} | {fmt_spread(med['ttt'], 1)} | "
                         f"{fmt_spread(med.get('ttt_x'), 3)} |")
        lines += ["", f"![divergence]({model}_divergence.png)", ""]
        _divergence_plot(runs_of, out / f"{model}_divergence.png", model)
    write_text(str(out / "README.md"), "\n".join(lines) + "\n")
    write_csv(str(out / "merge_delay.csv"), rows, list(rows[0]))


def _regime_line(runs_of: dict) -> str:
    """Where the runs' ratios were measured: workers per core and the compute split (medians over
    every run of the model; the step and the rest is the iteration less forward, backward and the
    exposed wait).  This study measures quality; the delayed merge's iteration time against its bound
    is make bench's to measure (results/bench, comm/backward 7)."""
    runs = list(runs_of.values())
    med = {k: statistics.median(r["summary"][k] for r in runs) for k in ("mean_forward", "mean_backward")}
    rest = statistics.median(r["summary"]["mean_iteration_time"] - r["summary"]["mean_forward"]
                             - r["summary"]["mean_backward"] - r["summary"]["mean_wait"] for r in runs)
    workers = {(r["summary"]["workers"], r["hardware"]["cores"]) for r in runs}
    return (", ".join(f"{w} workers on {c} cores" for w, c in sorted(workers)) + f"; forward "
            f"{1e3 * med['mean_forward']:.1f} ms, backward {1e3 * med['mean_backward']:.1f} ms, step and the rest "
            f"{1e3 * rest:.1f} ms (backward / forward {med['mean_backward'] / med['mean_forward']:.2f}, step / "
            f"backward {rest / med['mean_backward']:.2f}); iteration times against their bounds: `make bench`.")


def _link_line(runs_of: dict) -> str:
    """The link as the runs met it: its rate, and the all-reduce of all parameters over the
    measured backward pass (the fixed rate was chosen for about 7x; the host's speed moves it)."""
    ratios, rate = [], None
    for run in runs_of.values():
        link = record_link(run)
        nbytes = run["extra"]["model"]["bytes"]
        ratios.append(link.seconds("all_reduce", nbytes, run["extra"]["world_size"]) / run["summary"]["mean_backward"])
        rate = run["extra"]["link"]["gbps"]
    return (f"Emulated link {1e3 * rate:g} Mbit/s: the all-reduce of all parameters takes "
            f"{fmt_spread(median_spread(ratios), 2)} x the measured backward pass.")


def _divergence_plot(runs_of: dict, path: Path, model: str) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.8))
    colors = plt.get_cmap("tab10").colors
    for (delay, seed), run in sorted(runs_of.items()):
        points = [(d["iteration"], d["mean"]) for d in run.get("divergence", [])]
        if points:
            ax.plot(*zip(*points), color=colors[delay], alpha=0.8, lw=1,
                    label=f"merge_delay={delay}" if seed == min(s for d, s in runs_of if d == delay) else None)
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean divergence ||mean - local|| / sqrt(n)")
    ax.set_title(f"{model}: divergence across workers (3 seeds each)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(RATES), choices=list(RATES))
    p.add_argument("--out", default="results/merge_delay")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every run")
    args = p.parse_args(argv)
    out = Path(args.out)
    if not args.report_only:
        for model in args.models:
            sweep(model, RATES[model], EVAL[model] + args.set)
        write_compact(collect(["multirun/merge_delay_cpu"]), out / "runs")
    runs = collect([out / "runs"])
    if not runs:
        raise SystemExit(f"merge_delay_study: no run records under {out / 'runs'}")
    # The runs' own span (records only, so --report-only says it too); the sweep's start-up is not in it.
    seconds = sum(r["end_time"] - r["start_time"] for r in runs if r.get("start_time") and r.get("end_time"))
    report(runs, out, seconds or None)
    print(f"{out}/README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
