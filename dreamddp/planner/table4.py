"""``dreamddp-plan table4``: Streaming DiLoCo's Table 4 (Douillard et al. 2025, arXiv:2501.18512),
the Gbit/s each method needs for a compute utilization, recomputed by the planner from the
setup the paper states, beside the published values (streaming_diloco_table4.yaml, which names
its source), and rows no one has published (DreamDDP, PLSGD-ENP, DreamDDP with 4-bit compression).

Nothing here is fitted to the published numbers.  Where the paper is silent, the assumptions are
the constants below, and the generated README states them.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from dreamddp.planner import report
from dreamddp.planner.predict import RECIPES, Planner
from dreamddp.planner.spec import Cluster, Level, model_of

PUBLISHED = Path(__file__).with_name("streaming_diloco_table4.yaml")

# The paper's rows -> our recipes (planner/predict.py)
ROWS = {
    "Data-Parallel": "ascwfbp",
    "Vanilla DiLoCo": "diloco",
    "Streaming DiLoCo": "streaming_diloco_blocking",
    "Streaming DiLoCo w/ overlapped com.": "streaming_diloco",
    "Streaming DiLoCo w/ overlapped FP4 com.": "streaming_diloco_fp4",
}
UNPUBLISHED = ("dreamddp", "dreamddp_q4", "plsgd_enp", "ssgd")

# Where the paper is silent
REPLICAS = 2  # its experiments' replica count; the ring factor 2(R-1)/R is then 1
BYTES_PER_PARAM = 4  # fp32 on the wire unless quantised: section 2.4 lowers FP32 outer gradients to FP4
BACKWARD_RATIO = 2.0  # backward = 2 x forward (the 6ND rule's 2ND forward, 4ND backward)
LATENCY_MS = 0.0
ALPHA_MS = 0.0
OPTIMIZER_S = 0.0  # "step time (pure compute)": forward and backward only


def load_published(path=PUBLISHED) -> dict:
    import yaml

    return yaml.safe_load(Path(path).read_text())


def planner_for(spec: dict, H: int, fragment_layers: int) -> Planner:
    model = model_of({"name": "", "n_layers": spec["layers"], "params": spec["params"],
                      "bytes_per_param": BYTES_PER_PARAM},
                     {"step_time_s": spec["step_time_s"], "backward_ratio": BACKWARD_RATIO,
                      "optimizer_s": OPTIMIZER_S}, REPLICAS)
    cluster = Cluster(replicas=REPLICAS, workers_per_replica=1, slow=Level(1.0, LATENCY_MS / 1e3),
                      alpha_s=ALPHA_MS / 1e3)
    return Planner(model, cluster, H, fragment_layers)


def compute(published: dict) -> dict:
    """Every cell: {model: {recipe: [Gbit/s per target] or the reason it has none}}."""
    stated, targets = published["stated"], published["targets"]
    ours: dict = {}
    for name, spec in published["models"].items():
        planner = planner_for(spec, int(stated["H"]), int(stated["fragment_layers"]))
        ours[name] = {}
        for recipe in (*ROWS.values(), *UNPUBLISHED):
            try:
                ours[name][recipe] = [planner.needed_gbps(recipe, t) for t in targets]
            except ValueError as e:
                ours[name][recipe] = str(e)
        ours[name]["_fragments"] = RECIPES["streaming_diloco"].config(planner.model, planner.H,
                                                                       planner.fragment_layers).fragments
    return ours


def _cell(pub: float, our) -> str:
    if isinstance(our, str):
        return f"{pub:g} / n/a"
    return f"{pub:g} / {report.fmt_gbps(our)} ({our / pub:.2f}x)"


def write_report(out, command: str, published_path=PUBLISHED) -> str:
    published = load_published(published_path)
    stated, targets = published["stated"], published["targets"]
    ours = compute(published)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ratios = [ours[m][ROWS[row]][i] / v for row, by_model in published["published"].items()
              for m, values in by_model.items() for i, v in enumerate(values)
              if not isinstance(ours[m][ROWS[row]], str) and math.isfinite(ours[m][ROWS[row]][i])]
    err = statistics.median(abs(r - 1) for r in ratios)
    grid = sorted({v for rows in published["published"].values() for vs in rows.values() for v in vs if v >= 1})
    step = statistics.median(b / a for a, b in zip(grid, grid[1:]))
    fp4 = "Streaming DiLoCo w/ overlapped FP4 com."
    full = "Streaming DiLoCo w/ overlapped com."
    pub_q = statistics.median(a / b for m in published["models"] for a, b in
                              zip(published["published"][full][m], published["published"][fp4][m]))
    our_q = statistics.median(a / b for m in published["models"] for a, b in
                              zip(ours[m][ROWS[full]], ours[m][ROWS[fp4]]))
    heads = [f"{t:.0%}" for t in targets]
    frags = ", ".join(f"{ours[m]['_fragments']} for {m}" for m in published["models"])
    lines = [
        "# Streaming DiLoCo's Table 4, recomputed by dreamddp-plan", "",
        f"Made by `{command}` (`make plan-table4`); every number below is generated.", "",
        f"Published values: {published['source']} ({published['url']}), copied into "
        f"[dreamddp/planner/{PUBLISHED.name}](../../../dreamddp/planner/{PUBLISHED.name}).", "",
        "## Setup", "",
        "Stated by the paper and used as stated: "
        f"H = {stated['H']} for every DiLoCo variant; fragments of {stated['fragment_layers']} layers, "
        f"{stated['pattern']} ({frags}); "
        f"overlap tau = {stated['tau']} inner step; FP4 = {stated['quantize']}; the step time "
        f"({stated['step_time_is']}) and layer count of each model: "
        + ", ".join(f"{m}: {s['layers']} layers, {s['step_time_s']:g} s" for m, s in published["models"].items())
        + f". The MFU ({stated['mfu']}) enters only through those step times.", "",
        "Assumed where the paper is silent (planner/table4.py's constants): "
        f"{REPLICAS} replicas of one worker each (its experiments' count; the simulation's is not stated), "
        f"{BYTES_PER_PARAM} bytes per parameter on the wire unless quantised (fp32), parameters split into "
        f"equal layers with no separate embedding, backward = {BACKWARD_RATIO:g} x forward, no optimizer time, "
        f"{LATENCY_MS:g} ms latency and {ALPHA_MS:g} ms per collective.", "",
        "The paper's rows are our recipes: "
        + "; ".join(f"{row} = `{r}` ({RECIPES[r].label})" for row, r in ROWS.items()) + ".", "",
        "## Published against ours", "",
        f"Median |ours/published - 1| over {len(ratios)} cells: **{err:.2f}** "
        f"(median ours/published {statistics.median(ratios):.2f}). Each cell: published Gbit/s / ours (ratio).", "",
        f"The published values sit on a log grid (median step between neighbouring values {step:.3f}x): each is "
        "presumably the first grid rate that reaches the utilization, so it may overstate the rate by up to one step.",
        "",
        f"The published overlapped-com. row needs a median {pub_q:.2f}x the rate of the FP4 row; ours "
        f"{our_q:.2f}x, the bytes fp32 and E3M0 (with its block scales) put on the wire."
        + (" The paper's smaller ratio suggests its unquantised rows send fewer bytes than fp32 (bf16, say): it "
           "does not say, and nothing here is changed to match it." if pub_q < 0.75 * our_q else ""), "",
        "Two modelling differences: the paper's simulator overlaps the (outer) gradient reduction with the "
        "backward pass for every method; our engine's DiLoCo and Streaming DiLoCo (tau 0) sync after the "
        "optimizer step, blocking, so without overlap fragments do not help here. Our Data-Parallel "
        "(`ascwfbp`) completes every gradient before the step, where the paper's DAG may also overlap a "
        "layer's reduction with the next forward.", "",
    ]
    for m in published["models"]:
        lines += [f"### {m}", "", "| method | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
        for row, r in ROWS.items():
            our = ours[m][r]
            cells = [_cell(v, our if isinstance(our, str) else our[i])
                     for i, v in enumerate(published["published"][row][m])]
            lines.append(f"| {row} (`{r}`) | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Rows no one has published (ours only, Gbit/s)", "",
              "| model | recipe | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    for m in published["models"]:
        for r in UNPUBLISHED:
            our = ours[m][r]
            cells = [f"n/a: {our}"] + [""] * (len(heads) - 1) if isinstance(our, str) else \
                [report.fmt_gbps(g) for g in our]
            lines.append(f"| {m} | `{r}` ({RECIPES[r].label}) | " + " | ".join(cells) + " |")
    lines += ["", "## Utilization against the slow link (ours)", ""]
    rates = report.rate_grid(0.1, 1000.0)
    for m, spec in published["models"].items():
        planner = planner_for(spec, int(stated["H"]), int(stated["fragment_layers"]))
        curves = report.curves(planner, (*ROWS.values(), "dreamddp", "dreamddp_q4"), rates)
        report.figure(curves, rates, out / f"utilization_{m}.png", f"{m}: {spec['layers']} layers, "
                      f"{spec['step_time_s']:g} s per step, H={stated['H']}, {REPLICAS} replicas")
        lines.append(f"![{m}](utilization_{m}.png)")
    (out / "README.md").write_text("\n".join(lines) + "\n")
    (out / "table4.json").write_text(json.dumps({"command": command, "ours": ours, "median_abs_error": err},
                                                indent=1, default=str) + "\n")
    return f"median |ours/published - 1| = {err:.3f} over {len(ratios)} cells; written to {out}"
