"""``dreamddp-bench card TIME QUALITY --out DIR``: the methods the field moved to, one card per link rate.

TIME is a ``dreamddp-bench run`` folder at one comm/backward ratio (``make bench-methods``'
``results/bench/methods/time/ratio<r>``: the compute presets); QUALITY is the same methods
trained for longer on the small presets, one seed per repetition
(``results/bench/methods/quality``).  Per model, one row per method: its iteration time and the
bytes it puts on the wire per iteration at that ratio, each over DreamDDP's inside one
repetition; its final training and evaluation loss at equal iterations, and their difference
from DreamDDP's in the same seed; the training seconds to the quality runs' loss target (those
ran at their own ratio, which the card names); and the claim of the method's source paper,
to read the measured columns against.  Medians over repetitions, min-max in brackets.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from dreamddp.atomic import write_csv, write_text
from dreamddp.reports import bench as report
from dreamddp.reports.predict import mean_iteration, timed
from dreamddp.bench.segments import TIMED
from dreamddp.reports.spread import fmt_spread, median_spread
from dreamddp.reports.target import SMOOTH

REFERENCE = report.REFERENCE  # DreamDDP
# What each method's source says it does, to read the measured columns against (the issue's
# papers; PAPER.md for Streaming DiLoCo).  Claims, not our numbers.
CLAIMS = {  # each paper's claim beside the method that implements it; "ours" where no paper's is
    "flsgd": "Local SGD (FLSGD): one average per H steps, H x fewer syncs than S-SGD",
    "dreamddp": "DreamDDP: FLSGD's traffic spread layer by layer over the window, hidden behind backward",
    "dreamddp+topk": "ours: DreamDDP's syncs as top-k 1 % (fp16 values) with error feedback; no paper's claim",
    "dreamddp+q4": "ours: DreamDDP's syncs in 4-bit blocks with error feedback; no paper's claim",
    "diloco": "DiLoCo (arXiv 2311.08105): the outer Nesterov step on H local steps matches "
              "synchronous training's loss with H x fewer syncs",
    "diloco_eager": "eager updates (arXiv 2502.12996): the outer update one window late, the local change standing "
                    "in for the missing average, hides the sync at a small loss cost (naive delay costs more)",
    "sparseloco": "SparseLoCo (arXiv 2508.15706): top-k 1-3 % with 2-bit values and error feedback in place of "
                  "outer momentum keeps or beats DiLoCo's loss while sending a small fraction of its bytes",
    "demo": "ours: DeMo's DCT top-k codec with its momentum as error feedback, but the trainer's optimizer in "
            "place of DeMo's sign-SGD: no paper's claim",
    "dreamddp_diloco": "ours (layer-wise DiLoCo): DiLoCo's outer step once per window per unit on DreamDDP's schedule",
    "dreamddp_sparseloco": "ours: SparseLoCo's codec on DreamDDP's per-unit syncs; no paper's claim",
    "streaming_diloco+e3m0": "Streaming DiLoCo (arXiv 2501.18512): staggered fragments cut peak bandwidth about P x "
                             "and 4-bit adds a further cut, at similar quality",
}


def wire_per_iteration(rec: dict) -> float:
    """Bytes on the wire per timed iteration (compressed payloads at their encoded size)."""
    rows = timed(rec)
    return statistics.fmean(r.get("wire_bytes", r["bytes"]) for r in rows)


def final_train(rec: dict) -> float:
    return statistics.fmean(r["loss"] for r in rec["iterations"][-SMOOTH:])


def final_eval(rec: dict) -> float | None:
    evals = rec.get("evals") or []
    return evals[-1]["loss"] if evals else None


def _difference(reps: dict, label: str, of):
    """``of(label) - of(REFERENCE)`` inside each repetition (one seed), then the median and spread."""
    pairs = [(of(s[label]), of(s[REFERENCE])) for s in reps.values() if label in s and REFERENCE in s]
    return median_spread([a - b for a, b in pairs if a is not None and b is not None])


def rows(time_runs: str, quality_runs: str) -> list[dict]:
    times, quality = report.load(time_runs), report.load(quality_runs)
    out = []
    for model in times:
        treps, qreps = times[model], quality.get(model, {})
        target, ttt = report.times_to_target(qreps) if qreps else (None, {})
        for label in TIMED:
            tmine = [s[label] for s in treps.values() if label in s]
            qmine = [s[label] for s in qreps.values() if label in s]
            if not tmine and not qmine:
                continue
            out.append({
                "model": model, "method": label, "time_reps": len(tmine), "quality_reps": len(qmine),
                "iteration_s": median_spread(mean_iteration(r) for r in tmine),
                "x_dreamddp": report.ratio_over(treps, label, REFERENCE),
                "wire_mib": median_spread(wire_per_iteration(r) / 2**20 for r in tmine),
                "wire_x_dreamddp": report.ratio_over(treps, label, REFERENCE, of=wire_per_iteration),
                "train_loss": median_spread(final_train(r) for r in qmine),
                "train_minus_dreamddp": _difference(qreps, label, final_train),
                "eval_loss": median_spread(final_eval(r) for r in qmine),
                "eval_minus_dreamddp": _difference(qreps, label, final_eval),
                "loss_target": target, "time_to_target_s": median_spread(ttt.get(label, [])),
                "claim": CLAIMS.get(label, ""),
            })
    return out


def _ratio(runs: str) -> float:
    return float(json.loads((Path(runs) / "bench.json").read_text())["args"]["ratio"])


def _iterations(runs: str) -> int | None:
    return json.loads((Path(runs) / "bench.json").read_text())["args"].get("iterations")


def write(time_dir: str, quality_dir: str, out: str) -> str:
    time_runs, quality_runs = str(Path(time_dir) / "runs"), str(Path(quality_dir) / "runs")
    for d in (time_runs, quality_runs):
        if not (Path(d) / "bench.json").is_file():
            raise SystemExit(f"card: {d}: no bench.json (not a folder dreamddp-bench run wrote)")
    table = rows(time_runs, quality_runs)
    ratio, qratio = _ratio(time_runs), _ratio(quality_runs)
    rel = lambda d: os.path.relpath(d, out)  # noqa: E731
    quality = (f"quality: the small presets, {_iterations(quality_runs)} iterations, one seed per repetition, "
               f"comm/backward {qratio:g}")
    source = (f"[{quality_dir}]({rel(quality_dir)}/README.md) (iteration time, bytes and {quality})"
              if Path(time_dir).resolve() == Path(quality_dir).resolve() else
              f"[{time_dir}]({rel(time_dir)}/README.md) (iteration time and bytes: the compute presets, comm/backward "
              f"{ratio:g}) and [{quality_dir}]({rel(quality_dir)}/README.md) ({quality})")
    lines = [f"# The methods the field moved to, at comm/backward {ratio:g}", "",
             f"Made by `dreamddp-bench card {time_dir} {quality_dir} --out {out}` from the run records of "
             f"{source}. Medians over "
             "repetitions, min-max in brackets; a ratio or a difference is taken inside one repetition (one job; "
             "in the quality runs, one seed) before its median, so a difference whose spread spans 0 is a tie. "
             "Wire bytes: what the link, the record and the simulator charge (a compressed payload at its encoded "
             "size). Train loss: the mean of the last "
             f"{SMOOTH} iterations; eval loss: the evaluation at the last iteration. Time to target: training "
             f"seconds in the quality runs until the smoothed training loss reaches their target (the highest final "
             f"one among them, so every run reaches it).", ""]
    for model in dict.fromkeys(r["model"] for r in table):
        mine = [r for r in table if r["model"] == model]
        target = mine[0]["loss_target"]
        lines += [f"## {model}", "",
                  "| method | iteration s | x DreamDDP | wire MiB / iteration | wire x DreamDDP | train loss | "
                  "train - DreamDDP | eval loss | eval - DreamDDP | "
                  + (f"time to loss {target:.3f} (s) | " if target is not None else "time to target (s) | ")
                  + "the paper's claim |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in mine:
            lines.append(f"| {r['method']} | {fmt_spread(r['iteration_s'])} | {fmt_spread(r['x_dreamddp'], 2)} | "
                         f"{fmt_spread(r['wire_mib'], 3)} | {fmt_spread(r['wire_x_dreamddp'], 3)} | "
                         f"{fmt_spread(r['train_loss'], 3)} | {fmt_spread(r['train_minus_dreamddp'], 3)} | "
                         f"{fmt_spread(r['eval_loss'], 3)} | {fmt_spread(r['eval_minus_dreamddp'], 3)} | "
                         f"{fmt_spread(r['time_to_target_s'], 1)} | {r['claim']} |")
        lines.append("")
    write_text(Path(out) / "README.md", "\n".join(lines))
    write_csv(Path(out) / "card.csv", [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()} for r in table])
    return str(Path(out) / "README.md")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dreamddp-bench card", description=__doc__.split("\n\n")[0])
    p.add_argument("time_dir", help="a dreamddp-bench run folder at one ratio (iteration time, bytes)")
    p.add_argument("quality_dir", help="a dreamddp-bench run folder of the same methods trained longer (loss)")
    p.add_argument("--out", required=True, help="the card's folder: README.md and card.csv")
    args = p.parse_args(argv)
    print(write(args.time_dir, args.quality_dir, args.out))
    return 0
