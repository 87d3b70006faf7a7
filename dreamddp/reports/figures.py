"""The paper's figures as PNG, from compact run records only (matplotlib, Agg): ``FIGURES`` routes
each study's runs to its figures.  The evaluation metric is accuracy where runs have it, else loss;
time is the cumulative sum of iteration times (evaluation and start-up excluded)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from dreamddp.algorithms import ALGORITHMS  # noqa: E402
from dreamddp.reports.records import Record  # noqa: E402
from dreamddp.reports.tables import algo_order, by_study, link_label  # noqa: E402

_COLORS = dict(zip(sorted(ALGORITHMS, key=algo_order), plt.get_cmap("tab10").colors))
_STYLES = {5: ":", 10: "-", 20: "--"}


def label(run: Record, with_h: bool = False) -> str:
    return run.variant + (f" H={run.H}" if with_h and run.H is not None else "")


def color(run: Record):
    return _COLORS.get(run.algo, "black")


def metric_of(runs: list[Record]) -> str:
    return "accuracy" if any("accuracy" in e.values for r in runs for e in r.evaluation) else "loss"


def _order(run: Record) -> tuple:
    return (algo_order(run.variant), run.H or 0)


def _panels(runs: list[Record], n_rows: int = 1, width: float = 5.0, height: float = 3.8):
    """A figure with a column per (model, data, workers, link): (fig, axes, [(title, its runs)])."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for r in runs:
        groups[f"{r.model} on {r.data}\n{r.world} workers, link {link_label(r)}"].append(r)
    keys = sorted(groups)
    fig, axes = plt.subplots(n_rows, len(keys), figsize=(width * len(keys), height * n_rows), squeeze=False)
    return fig, axes, [(k, sorted(groups[k], key=_order)) for k in keys]


def save(fig, path: Path, title: str, dpi: int = 110) -> Path:
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def convergence(runs: list[Record], path: Path, x: str = "epoch") -> Path:
    """Evaluation metric (top) and training loss (bottom) vs epoch or training time, one column per model."""
    fig, axes, panels = _panels(runs, n_rows=2)
    for col, (key, members) in enumerate(panels):
        metric = metric_of(members)
        top, bottom = axes[0][col], axes[1][col]
        for r in members:
            xs_e = [r.epoch(e.iteration) if x == "epoch" else e.elapsed for e in r.evaluation]
            top.plot(xs_e, [e.get(metric) for e in r.evaluation], "o-", ms=3, color=color(r), label=label(r))
            xs_i = [r.epoch(i.iteration) if x == "epoch" else i.elapsed for i in r.iterations]
            bottom.plot(xs_i, [i.loss for i in r.iterations], "-", lw=1, color=color(r), label=label(r))
        xlabel = "epoch" if x == "epoch" else "training time (s)"
        top.set(title=key, xlabel=xlabel, ylabel=f"eval {metric}")
        bottom.set(xlabel=xlabel, ylabel="train loss (per iteration)")
        top.legend(fontsize=8)
    return save(fig, path, f"Convergence vs {'epoch' if x == 'epoch' else 'wall-clock training time'}")


def h_ablation(runs: list[Record], path: Path) -> Path:
    """Per model: eval metric vs iteration, vs time; mean iteration time per (algorithm, H)."""
    fig, axes, panels = _panels(runs, n_rows=3, height=3.4)
    for col, (key, members) in enumerate(panels):
        metric = metric_of(members)
        for r in members:
            for row, xkey in ((0, "iteration"), (1, "elapsed")):
                axes[row][col].plot([getattr(e, xkey) for e in r.evaluation], [e.get(metric) for e in r.evaluation],
                                    _STYLES.get(r.H, "-."), marker="o", ms=3, color=color(r), label=label(r, True))
        axes[0][col].set(title=key, xlabel="iteration", ylabel=f"eval {metric}")
        axes[1][col].set(xlabel="training time (s)", ylabel=f"eval {metric}")
        axes[0][col].legend(fontsize=7)
        ax = axes[2][col]
        ax.bar([label(r, True) for r in members], [r.mean_iteration for r in members],
               color=[color(r) for r in members])
        ax.set(ylabel="mean iteration time (s)")
        ax.tick_params(axis="x", rotation=45, labelsize=7)
    return save(fig, path, "H ablation")


def divergence(runs: list[Record], path: Path) -> Path:
    """Mean divergence vs iteration (top), per-unit divergence at the last measurement (bottom)."""
    runs = [r for r in runs if r.divergence]
    if not runs:
        raise ValueError("divergence: no run has a divergence series (train.divergence_every=0?)")
    fig, axes, panels = _panels(runs, n_rows=2, width=6.0)
    for col, (key, members) in enumerate(panels):
        top, bottom = axes[0][col], axes[1][col]
        for r in members:
            top.plot([d.iteration for d in r.divergence], [d.mean for d in r.divergence], "o-", ms=3,
                     color=color(r), label=label(r, True))
            values = r.divergence[-1].per_unit
            bottom.plot(range(len(values)), values, ".-", color=color(r), label=label(r, True))
        top.set(title=key, xlabel="iteration", ylabel="mean divergence ||mean_w - w|| / sqrt(numel)")
        bottom.set(xlabel="unit (backward order: output side first)", ylabel="divergence at the last measurement")
        top.legend(fontsize=8)
    return save(fig, path, "Parameter divergence across workers")


def _link_x(run: Record) -> float:
    """Link speed as 1/ratio (ratio studies) or Gbit/s: larger is a faster link either way."""
    return 1.0 / run.comm_ratio if run.comm_ratio else float(run.bandwidth_gbps or 0.0)


def bandwidth(runs: list[Record], path: Path) -> Path:
    """Mean iteration time and exposed wait vs link speed, one line per algorithm."""
    by_model: dict[str, list[Record]] = defaultdict(list)
    for r in runs:
        by_model[f"{r.model}, {r.world} workers"].append(r)
    fig, axes = plt.subplots(2, len(by_model), figsize=(5.5 * len(by_model), 7), squeeze=False)
    for col, (key, members) in enumerate(sorted(by_model.items())):
        lines: dict[str, list[Record]] = defaultdict(list)
        for r in members:
            lines[label(r, True)].append(r)
        for name, rs in sorted(lines.items(), key=lambda kv: _order(kv[1][0])):
            rs = sorted(rs, key=_link_x)
            xs = [_link_x(r) for r in rs]
            axes[0][col].loglog(xs, [r.mean_iteration for r in rs], "o-", color=color(rs[0]), label=name)
            axes[1][col].semilogx(xs, [r.mean_wait for r in rs], "o-", color=color(rs[0]), label=name)
        ticks = sorted({_link_x(r) for r in members})
        for ax in axes[:, col]:
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.xaxis.set_minor_locator(NullLocator())  # x only: keep the log y axis readable
        ratio = any(r.comm_ratio for r in members)
        xlabel = "link speed: backward time / all-reduce time (1 / comm_ratio)" if ratio else "link (Gbit/s)"
        axes[0][col].set(title=key, xlabel=xlabel, ylabel="mean iteration time (s)")
        axes[1][col].set(xlabel=xlabel, ylabel="mean exposed wait (s)")
        axes[0][col].legend(fontsize=8)
    return save(fig, path, "Bandwidth sweep")


def iteration_time(runs: list[Record], path: Path) -> Path:
    """Stacked bars per model: compute (iteration - exposed wait) and exposed wait, per algorithm."""
    fig, axes, panels = _panels(runs, n_rows=1, width=4.5)
    for col, (key, members) in enumerate(panels):
        ax = axes[0][col]
        names = [label(r) for r in members]
        wait = [r.mean_wait for r in members]
        busy = [r.mean_iteration - w for r, w in zip(members, wait)]
        ax.bar(names, busy, color=[color(r) for r in members])
        ax.bar(names, wait, bottom=busy, color="lightgrey", hatch="//", edgecolor="grey")
        ax.set(title=key, ylabel="mean iteration time (s)")
        ax.tick_params(axis="x", rotation=45, labelsize=8)
        ax.legend(handles=[Patch(facecolor="white", edgecolor="black", label="compute + other (colour: algorithm)"),
                           Patch(facecolor="lightgrey", hatch="//", edgecolor="grey", label="exposed wait")], fontsize=7)
    return save(fig, path, "Iteration time (mean over timed iterations)")


FIGURES = {
    "convergence": [("convergence_epoch", lambda rs, p: convergence(rs, p, "epoch")),
                    ("convergence_time", lambda rs, p: convergence(rs, p, "time"))],
    "h_ablation": [("h_ablation", h_ablation)],
    "divergence": [("divergence", divergence)],
    "bandwidth": [("bandwidth", bandwidth)],
    "iteration_time": [("iteration_time", iteration_time)],
}


def make_figures(runs: list[Record], out_dir: Path) -> list[Path]:
    """Every figure whose study has runs: ``<out>/figures/<figure>[_<scale>].png``."""
    return [draw(members, out_dir / "figures" / f"{name}{stem[len(members[0].study):]}.png")  # stem: study[_scale]
            for stem, members in by_study(runs, skip=()) for name, draw in FIGURES.get(members[0].study, [])]
