"""What ``dreamddp-plan`` writes: the markdown table of its predictions and the figure of
compute utilization against the slow link's rate (matplotlib, Agg, imported only here)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from dreamddp.planner.predict import RECIPES, Planner


def fmt_gbps(g: float) -> str:
    if math.isinf(g):
        return "unreachable"
    return f"{g:.3g}" if g >= 0.01 else f"{g:.2g}"


def fmt_bytes(b: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.3g} B"


def rows(planner: Planner, recipes, targets) -> list[dict]:
    """Per recipe: the prediction at the cluster's rate and the rate each target needs; a recipe
    the model cannot take (e.g. PLSGD-ENP with H above its units) is a row with its reason."""
    out = []
    for name in recipes:
        try:
            p = planner.predict(name)
            need = [planner.needed_gbps(name, t) for t in targets]
        except ValueError as e:  # ConfigError included: one line naming the field
            out.append({"recipe": name, "error": str(e)})
            continue
        out.append({"recipe": name, "iteration_s": p.iteration_s, "wait_s": p.wait_s, "compute_s": p.compute_s,
                    "utilization": p.utilization, "wire_bytes": p.wire_bytes,
                    "needed_gbps": dict(zip((f"{t:g}" for t in targets), need))})
    return out


def table(rows_: list[dict], targets, gbps: float) -> str:
    head = (["recipe", f"iteration s at {gbps:g} Gbit/s", "compute utilization", "wire bytes / worker / iteration"]
            + [f"Gbit/s for {t:.0%}" for t in targets])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows_:
        if "error" in r:
            lines.append(f"| {r['recipe']} | n/a: {r['error']} |" + " |" * (len(head) - 2))
            continue
        cells = [r["recipe"], f"{r['iteration_s']:.4g}", f"{r['utilization']:.1%}", fmt_bytes(r["wire_bytes"])]
        cells += [fmt_gbps(g) for g in r["needed_gbps"].values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curves(planner: Planner, recipes, rates) -> dict[str, list[float]]:
    out = {}
    for name in recipes:
        try:
            out[name] = [planner.utilization(name, g) for g in rates]
        except ValueError:
            continue
    return out


def figure(curves_: dict[str, list[float]], rates, path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, u in curves_.items():
        ax.plot(rates, u, marker=".", label=RECIPES[name].label or name)
    ax.set_xscale("log")
    ax.set_xlabel("slow link (Gbit/s per replica)")
    ax.set_ylabel("compute utilization")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)


def rate_grid(lo: float = 0.01, hi: float = 1000.0, per_decade: int = 6) -> np.ndarray:
    n = int(round(math.log10(hi / lo) * per_decade)) + 1
    return np.logspace(math.log10(lo), math.log10(hi), n)
