"""The result card, ``dreamddp-results card RUNS... [--figure F] [--csv F] [--mix]``: one block per model,
data set and worker count, a row per algorithm (at most 8 columns, an all-n/a one left out); a speedup
is taken run against run of the same seed (and benchmark repetition) before its median.  A benchmark's
side runs are left out.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.reports.collect import collect
from dreamddp.reports.records import Record, order
from dreamddp.reports.versions import check_provenance
from dreamddp.reports.render import spread_table
from dreamddp.reports.spread import median_spread
from dreamddp.reports.target import SMOOTH, train_loss_points

BASELINES = ("ssgd", "flsgd")  # the speedup columns, in this order
COLUMNS = ("algorithm", "runs", "iteration_ms", "x_ssgd", "x_flsgd", "wait_ms", "wire_mib", "final_loss")
HEADER = ("algorithm", "runs", "iteration ms", "x S-SGD", "x FLSGD", "exposed wait ms", "wire MiB/it", "final loss")
DIGITS = (None, None, 1, 2, 2, 1, 3, 3)


def records_of(runs: list[dict]) -> list[Record]:
    """Typed records of collected (compact) runs, a benchmark segment labelled by its folder."""
    out = []
    for run in runs:
        source = Path(Record(run).source or "")
        out.append(Record.of(run, str(source), source.name if re.fullmatch(r"rep\d+", source.parent.name) else None))
    return out


def _unique_labels(records: list[Record]) -> None:
    """Runs that share a label but not their algo options (a sweep over H) get the differing
    options appended, so only repetitions share a label."""
    by_label = defaultdict(list)
    for r in records:
        by_label[r.label].append(r)
    for label, rs in by_label.items():
        keys = sorted({k for r in rs for k in r.options if len({str(b.option(k)) for b in rs}) > 1})
        for r in rs:
            if keys:
                r.label = label + " " + " ".join(f"{k}={r.option(k)}" for k in keys)


def blocks(records: list[Record]) -> dict[tuple, dict[str, list[Record]]]:
    """{(model, data, workers): {label: [records]}}, the runs a card shows."""
    by_block: dict[tuple, list[Record]] = defaultdict(list)
    for r in records:
        if r.label != "calibration" and not r.label.endswith("@memory"):
            by_block[(r.shown_model, r.data, r.world)].append(r)
    out = {}
    for key, members in by_block.items():
        _unique_labels(members)  # within the block: another model's options are not a variant
        by_label = defaultdict(list)
        for r in members:
            by_label[r.label].append(r)
        if any(r.paced for r in members):  # beside paced runs, ideal-link ones are another regime
            by_label = {lb: rs for lb, rs in by_label.items() if all(r.paced for r in rs)}
        out[key] = dict(by_label)
    return out


def _speedup(base: list[Record], runs: list[Record]):
    """Median (spread) of base's time / this one's, paired by seed and repetition where both have it."""
    by_seed = {r.pair_key: r.mean_iteration for r in base}
    paired = [by_seed[r.pair_key] / r.mean_iteration for r in runs if r.pair_key in by_seed]
    if not paired and base:
        paired = [statistics.median(r.mean_iteration for r in base) / statistics.median(r.mean_iteration for r in runs)]
    return median_spread(paired)


def card_rows(records: list[Record]) -> list[tuple[tuple, list[dict]]]:
    """[(block key, rows)] with one row per algorithm (COLUMNS; spreads as (median, min, max))."""
    out = []
    for key, by_label in blocks(records).items():
        rows = []
        for label, rs in sorted(by_label.items(), key=lambda item: order(item[0], item[1][0].algo)):
            rows.append({"algorithm": label, "runs": len(rs),
                         "iteration_ms": median_spread([1e3 * r.mean_iteration for r in rs]),
                         **{f"x_{b}": _speedup(by_label[b], rs) if b in by_label else None for b in BASELINES},
                         "wait_ms": median_spread([1e3 * r.mean_wait for r in rs]),
                         "wire_mib": median_spread([r.wire_per_iteration() / 2**20 for r in rs]),
                         "final_loss": median_spread([r.final_loss() for r in rs])})
        out.append((key, rows))
    return out


def _link(rs: list[Record]) -> str:
    paced = [r for r in rs if r.paced]
    if not paced:
        return "ideal link"
    rates = [r.link_gbps for r in paced if r.link_gbps]
    rate = f" {1e3 * statistics.median(rates):.3g} Mbit/s" if rates else ""
    return f"{paced[0].link_backend} link{rate}"


def card_tables(records: list[Record]) -> list[dict]:
    """Per block: its caption and its table (templates' md_table; all-n/a columns dropped)."""
    out = []
    for (model, data, workers), rows in card_rows(records):
        members = [r for r in records if (r.shown_model, r.data, r.world) == (model, data, workers)]
        H = {r.option("H") for r in members} - {None}
        out.append({"caption": f"{model} on {data}, {workers} workers, {_link(members)}"
                               + (f", H={'/'.join(map(str, sorted(H)))}" if H else ""),
                    "table": spread_table(rows, list(zip(HEADER, COLUMNS, DIGITS)), collapse=True)})
    return out


def render(records: list[Record]) -> str:
    """The card as aligned plain text (the terminal's)."""
    lines = []
    for block in card_tables(records):
        lines += [block["caption"], ""]
        rows = [block["table"]["header"]] + block["table"]["rows"]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write_figure(records: list[Record], path: Path) -> Path:
    """Smoothed training loss against training seconds, one panel per block, a line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = blocks(records)
    fig, axes = plt.subplots(1, len(groups), figsize=(6.0 * len(groups), 4.2), squeeze=False)
    for ax, ((model, data, workers), by_label) in zip(axes[0], groups.items()):
        for i, (label, rs) in enumerate(by_label.items()):
            for k, r in enumerate(rs):
                points = train_loss_points(r.iterations)
                ax.plot([p[0] for p in points], [p[1] for p in points], color=f"C{i % 10}",
                        alpha=0.9 if k == 0 else 0.4, label=label if k == 0 else None)
        ax.set(title=f"{model} on {data}, {workers} workers", xlabel="training seconds",
               ylabel=f"training loss (mean of last {SMOOTH})")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


def write_card_csv(records: list[Record], path: Path) -> Path:
    """The card's rows: medians, with the spread's ends as ``<column>_min`` / ``<column>_max``."""
    flat = []
    for (model, data, workers), rows in card_rows(records):
        for r in rows:
            row = {"model": model, "data": data, "workers": workers}
            for k in COLUMNS:
                row.update({k: r[k]} if k in ("algorithm", "runs") else
                           dict(zip((k, f"{k}_min", f"{k}_max"), r[k] or (None, None, None))))
            flat.append(row)
    write_csv(path, flat)
    return path


def print_card(paths: list[str | Path], figure: str | Path | None = None, csv: str | Path | None = None,
               mix: bool = False) -> str:
    """Print the card of the completed runs under ``paths``; write the figure and the CSV if asked."""
    records = records_of(collect(paths))
    if not records:
        raise ValueError(f"no completed run records under {' '.join(map(str, paths))}")
    mixed, _ = check_provenance(records, mix, "card")
    text = render(records)
    if mixed:
        text = "mixes code versions:\n" + "\n".join(f"  {line}" for line in mixed) + "\n\n" + text
    print(text, end="")
    if figure:
        print(f"figure: {write_figure(records, Path(figure))}", file=sys.stderr)
    if csv:
        print(f"csv: {write_card_csv(records, Path(csv))}", file=sys.stderr)
    return text
