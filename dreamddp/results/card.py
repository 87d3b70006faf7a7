"""The result card: algorithms side by side, from run records alone.

    dreamddp-results card RUNS... [--figure loss_vs_time.png] [--csv card.csv]

``RUNS`` are run directories, run.json files, compact records or a sweep or
benchmark folder (searched recursively, as ``collect`` does).  Runs are grouped
into blocks of one model, data set and worker count; in each block one row per
algorithm: mean iteration time, speedup over S-SGD and over FLSGD (their time
over this one's), exposed wait, payload bytes per iteration and the final
training loss (the mean of the last ``SMOOTH`` iterations).  Where an algorithm
ran several times (repetitions, seeds) a value is the median with the min-max
spread in brackets, and a speedup is taken run against run of the same seed
before its median.  A benchmark's compute-only and engine-overhead runs (ideal
link beside paced ones), its calibration and memory runs are left out.  The
figure plots the smoothed training loss against training seconds.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.results.collect import collect
from dreamddp.results.spread import median_spread
from dreamddp.results.target import SMOOTH

BASELINES = ("ssgd", "flsgd")  # the speedup columns, in this order
# rows in this order of their algorithm (a label's part before "+", "@" or " "), the rest after
ORDER = ("ddp", "ssgd", "ascwfbp", "dear", "flsgd", "plsgd_enp", "streaming_diloco", "dreamddp", "nosync", "plain")
COLUMNS = ("algorithm", "runs", "iteration_ms", "x_ssgd", "x_flsgd", "wait_ms", "mib_per_iteration", "final_loss")


def _bench_label(run: dict) -> str | None:
    """A benchmark segment's label: its folder inside ``runs/<model>/rep<k>/``."""
    source = Path(run.get("source") or "")
    return source.name if re.fullmatch(r"rep\d+", source.parent.name) else None


def _variant(algo: dict) -> str:
    """The algorithm's name with the options that make it another variant of it."""
    name = algo["name"]
    if algo.get("overlap_forward"):
        name += "+overlap"
    if algo.get("merge_delay"):
        name += "+delay"
    if algo.get("scheduler") not in (None, "dreamddp"):
        name += f"+{algo['scheduler']}"
    return name


def _labels(runs: list[dict]) -> list[str]:
    """One label per run; runs that share a label but not their algo options (a sweep over H)
    get the differing options appended, so only repetitions share a label."""
    labels = [_bench_label(r) or _variant(r["config"]["algo"]) for r in runs]
    by_label = defaultdict(list)
    for i, label in enumerate(labels):
        by_label[label].append(i)
    for label, idx in by_label.items():
        algos = [runs[i]["config"]["algo"] for i in idx]
        keys = sorted({k for a in algos for k in a if len({str(b.get(k)) for b in algos}) > 1})
        for i in idx:
            if keys:
                labels[i] = label + " " + " ".join(f"{k}={runs[i]['config']['algo'].get(k)}" for k in keys)
    return labels


def _paced(run: dict) -> bool:
    return ((run.get("extra") or {}).get("link") or {}).get("backend", "ideal") != "ideal"


def _final_loss(run: dict) -> float:
    losses = [r["loss"] for r in run["iterations"] if r.get("loss") is not None]
    return statistics.fmean(losses[-SMOOTH:]) if losses else float("nan")


def _block_key(run: dict) -> tuple:
    s = run["summary"]
    return s["model"], s["data"], s["workers"]


def blocks(runs: list[dict]) -> dict[tuple, dict[str, list[dict]]]:
    """{(model, data, workers): {label: [runs]}}, the runs a card shows."""
    kept = [(label, r) for label, r in zip(_labels(runs), runs)
            if label != "calibration" and not label.endswith("@memory")]
    out: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for label, r in kept:
        out[_block_key(r)][label].append(r)
    for key, by_label in out.items():  # beside paced runs, ideal-link ones are another regime
        if any(_paced(r) for rs in by_label.values() for r in rs):
            out[key] = defaultdict(list, {lb: rs for lb, rs in by_label.items() if all(_paced(r) for r in rs)})
    return {k: dict(v) for k, v in out.items()}


def _order(label: str) -> tuple:
    base = re.split(r"[+@ ]", label, maxsplit=1)[0]
    return (ORDER.index(base) if base in ORDER else len(ORDER), label)


def _speedup(base: list[dict], runs: list[dict]):
    """Median (spread) of base's time / this one's, paired by seed where both have it."""
    t = lambda r: r["summary"]["mean_iteration_time"]  # noqa: E731
    by_seed = {r["config"].get("seed"): t(r) for r in base}
    paired = [by_seed[r["config"].get("seed")] / t(r) for r in runs if r["config"].get("seed") in by_seed]
    if not paired and base:
        paired = [statistics.median(map(t, base)) / statistics.median(map(t, runs))]
    return median_spread(paired)


def card_rows(runs: list[dict]) -> list[tuple[tuple, list[dict]]]:
    """[(block key, rows)] with one row per algorithm (COLUMNS; spreads as (median, min, max))."""
    out = []
    for key, by_label in blocks(runs).items():
        rows = []
        for label, rs in sorted(by_label.items(), key=lambda item: _order(item[0])):
            s = [r["summary"] for r in rs]
            rows.append({"algorithm": label, "runs": len(rs),
                         "iteration_ms": median_spread([1e3 * x["mean_iteration_time"] for x in s]),
                         **{f"x_{b}": _speedup(by_label[b], rs) if b in by_label else None for b in BASELINES},
                         "wait_ms": median_spread([1e3 * x["mean_wait"] for x in s]),
                         "mib_per_iteration": median_spread([x["bytes_per_iteration"] / 2**20 for x in s]),
                         "final_loss": median_spread([_final_loss(r) for r in rs])})
        out.append((key, rows))
    return out


def _fmt(value, digits: int) -> str:
    if value is None:
        return "n/a"
    m, lo, hi = value
    return f"{m:.{digits}f}" if lo == hi else f"{m:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def _link(rs: list[dict]) -> str:
    links = [r["extra"]["link"] for r in rs if _paced(r)]
    if not links:
        return "ideal link"
    rates = [link.get("gbps") for link in links if link.get("gbps")]
    rate = f" {1e3 * statistics.median(rates):.3g} Mbit/s" if rates else ""
    return f"{links[0]['backend']} link{rate}"


def render(runs: list[dict]) -> str:
    lines = []
    for (model, data, workers), rows in card_rows(runs):
        members = [r for r in runs if _block_key(r) == (model, data, workers)]
        H = {r["config"]["algo"].get("H") for r in members} - {None}
        lines += [f"{model} on {data}, {workers} workers, {_link(members)}"
                  + (f", H={'/'.join(map(str, sorted(H)))}" if H else ""), ""]
        table = [("algorithm", "runs", "iteration ms", "x S-SGD", "x FLSGD", "exposed wait ms", "MiB/iter", "final loss")]
        table += [(r["algorithm"], str(r["runs"]), _fmt(r["iteration_ms"], 1), _fmt(r["x_ssgd"], 2), _fmt(r["x_flsgd"], 2),
                   _fmt(r["wait_ms"], 1), _fmt(r["mib_per_iteration"], 3), _fmt(r["final_loss"], 3)) for r in rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for row in table:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write_figure(runs: list[dict], path: Path) -> Path:
    """Smoothed training loss against training seconds, one panel per block, a line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dreamddp.results.target import train_loss_points

    groups = blocks(runs)
    fig, axes = plt.subplots(1, len(groups), figsize=(6.0 * len(groups), 4.2), squeeze=False)
    for ax, ((model, data, workers), by_label) in zip(axes[0], groups.items()):
        for i, (label, rs) in enumerate(by_label.items()):
            for k, r in enumerate(rs):
                points = train_loss_points(r["iterations"])
                ax.plot([p[0] for p in points], [p[1] for p in points], color=f"C{i % 10}", alpha=0.9 if k == 0 else 0.4,
                        label=label if k == 0 else None)
        ax.set(title=f"{model} on {data}, {workers} workers", xlabel="training seconds",
               ylabel=f"training loss (mean of last {SMOOTH})")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_card_csv(runs: list[dict], path: Path) -> Path:
    """The card's rows: medians, with the spread's ends as ``<column>_min`` / ``<column>_max``."""
    flat = []
    for (model, data, workers), rows in card_rows(runs):
        for r in rows:
            row = {"model": model, "data": data, "workers": workers}
            for k in COLUMNS:
                v = r[k]
                if isinstance(v, tuple):
                    row.update({k: v[0], f"{k}_min": v[1], f"{k}_max": v[2]})
                else:
                    row.update({k: v} if k in ("algorithm", "runs") else {k: v, f"{k}_min": v, f"{k}_max": v})
            flat.append(row)
    write_csv(path, flat)
    return path


def print_card(paths: list[str | Path], figure: str | Path | None = None, csv: str | Path | None = None) -> str:
    """Print the card of the completed runs under ``paths``; write the figure and the CSV if asked."""
    runs = collect(paths)
    if not runs:
        raise ValueError(f"no completed run records under {' '.join(map(str, paths))}")
    text = render(runs)
    print(text, end="")
    if figure:
        print(f"figure: {write_figure(runs, Path(figure))}", file=sys.stderr)
    if csv:
        print(f"csv: {write_card_csv(runs, Path(csv))}", file=sys.stderr)
    return text
