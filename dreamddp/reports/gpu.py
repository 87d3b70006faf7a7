"""results/gpu/README.md: the GPU benchmark's ratios next to the CPU one's and the paper's, and memory.

Part of ``dreamddp-bench gpu --reports``.  Reads the reports' bench.csv (medians over
repetitions, made by dreamddp/reports/bench.py) of every ``<gpu>/<device kind>/<job>/``
(``devices``: one folder per kind of device, h200/, h100/, ...) and of the CPU ``make bench``,
and the run records (memory segments, the engine-overhead pairs); writes ``<gpu>/README.md``.
"""

from __future__ import annotations

import csv
from pathlib import Path

from dreamddp.bench import overhead, regime
from dreamddp.reports import bench as report
from dreamddp.reports import records
from dreamddp.reports.render import table, write_readme
from dreamddp.reports.spread import fmt_spread

def rows_of(csv_path: Path) -> dict[tuple[str, str], dict]:
    if not csv_path.is_file():
        return {}
    with open(csv_path) as f:
        return {(r["model"], r["algorithm"]): r for r in csv.DictReader(f)}


def fmt(row: dict | None, key: str, digits: int = 2) -> str:
    if row is None or row.get(key) in (None, "", "None"):
        return "n/a"
    return f"{float(row[key]):.{digits}f}"


def memory(jobs: list[dict], model: str) -> dict[str, float]:
    """Peak bytes per algorithm from the memory segments of every job of ``model`` (repetition 0)."""
    return {label[: -len("@memory")]: rec.peak_bytes
            for job in jobs for label, rec in job.get(model, {}).get(0, {}).items() if label.endswith("@memory")}


def devices(gpu: Path) -> list[tuple[str, str]]:
    """(card, folder) of every device kind under ``gpu``: a folder holding benchmark jobs."""
    return [(d.name.upper(), d.name) for d in sorted(gpu.iterdir())
            if d.is_dir() and any((job / "runs").is_dir() for job in d.iterdir())] if gpu.is_dir() else []


OVERHEAD_COLUMNS = tuple(overhead.overhead_key(a, b) for a, b in overhead.OVERHEAD)


def job_folders(gpu: Path) -> dict[str, list[Path]]:
    """{card: its benchmark jobs' folders (those holding run records), sorted}."""
    return {card: sorted(d for d in (gpu / sub).iterdir() if (d / "runs").is_dir()) for card, sub in devices(gpu)}


def write(gpu: Path, cpu_dir: Path, *, title: str | None = None, made_by: str | None = None,
          mix: bool = False) -> list[str]:
    cpu = rows_of(cpu_dir / "bench.csv")
    cpu_jobs = report.load(str(cpu_dir / "runs"))
    folders = job_folders(gpu)
    mixed = records.check_provenance([r for dirs in folders.values() for d in dirs for r in records.bench(d / "runs").records()]
                                     + records.bench(cpu_dir / "runs").records(), mix, f"report {gpu}")
    jobs = {d: report.load(str(d / "runs")) for dirs in folders.values() for d in dirs}
    timed: dict[str, dict] = {card: {} for card in folders}
    for card, dirs in folders.items():
        for d in dirs:
            for key, row in rows_of(d / "bench.csv").items():
                timed[card].setdefault(key, (row, d))
    cards = [card for card in folders if timed[card]]
    models = []
    for model in ("gpt2", "resnet18", "resnet50"):
        found = {card: next((d for (m, _), (_, d) in timed[card].items() if m == model), None) for card in cards}
        if not any(found.values()):
            continue
        regimes = []
        for card, some in found.items():
            if some is not None:
                reps = jobs[some][model]
                first = reps[min(reps)]
                rec = next(iter(first.values()))
                regimes.append((card, len(reps), regime.batch(rec.raw), regime.emulation(rec.raw, records.raw(first))
                                + " " + regime.compute_split(records.raw(first))))
        cpu_regime = None
        if model in cpu_jobs:
            cpu_first = cpu_jobs[model][min(cpu_jobs[model])]
            cpu_regime = f"{regime.batch(next(iter(cpu_first.values())).raw)}. " + regime.compute_split(records.raw(cpu_first))
        ran = [card for card in cards if found[card]]  # the machines that timed this model
        rows = []
        for algo in records.ordered(a for card in ran for (m, a) in timed[card] if m == model):
            g = {card: timed[card].get((model, algo), (None, None))[0] for card in ran}
            c = cpu.get((model, algo))
            paper = next((row for row in g.values() if row is not None), None)
            rows.append([algo] + [fmt(g[card], k) for card in ran for k in ("x_dreamddp", "bound_over_measured",
                                                                              "predicted_over_measured")]
                        + [fmt(c, "x_dreamddp"), fmt(c, "bound_over_measured"), fmt(paper, "paper_x_dreamddp")])
        header = ["algorithm"] + [f"{c} {k}" for c in ran for k in ("x DreamDDP", "bound / measured", "predicted / measured")]
        models.append({"name": model, "regimes": regimes, "cpu": cpu_regime,
                       "table": table(header + ["CPU x DreamDDP", "CPU bound / measured", "paper x DreamDDP (modelled)"], rows)})
    # the jobs that measured memory need not be those whose times the tables above show
    benches = [d for dirs in folders.values() for d in dirs]
    per_job = {(model, d): memory([jobs[d]], model) for model in ("gpt2", "llama2")
               for d in benches if d.name.startswith(model)}
    sources = {model: [d for d in benches if per_job.get((model, d))] for model in ("gpt2", "llama2")}
    peaks = []
    for model, dirs in sources.items():
        mem = {algo: peak for d in dirs for algo, peak in per_job[(model, d)].items()}
        plain = mem.get("plain@ideal")
        peaks += [(model, algo, mem[algo] / 2**20, mem[algo] / plain if plain else None) for algo in sorted(mem)]
    readme = write_readme(gpu, "gpu.md.j2", title=title or "The algorithms side by side on one GPU shared by 2 workers, "
                          "next to the CPU and the paper", mixed=mixed, made_by=made_by or "dreamddp-bench gpu --reports",
                          cpu_dir=cpu_dir, models=models, overhead=overhead_table(folders, jobs),
                          overhead_columns=OVERHEAD_COLUMNS, peaks=peaks,
                          memory_sources={m: [f"{d.parent.name}/{d.name}" for d in dirs] for m, dirs in sources.items() if dirs})
    return [readme]


def overhead_table(folders: dict, jobs: dict) -> list[list[str]]:
    """The engine's overhead on the ideal link, every job that measured it: S-SGD and ASC-WFBP
    against DDP, nosync against plain, each ratio inside one repetition, median (spread)."""
    rows = []
    for card, dirs in folders.items():
        for d in dirs:
            for model, reps in jobs[d].items():
                over = overhead.engine_overhead(records.raw_reps(reps))
                if not any(over.values()):
                    continue
                world = next(iter(next(iter(reps.values())).values())).world
                phases = overhead.phase_overhead(records.raw_reps(reps))
                split = " / ".join(f"{v[0]:+.2f}" for v in phases.values()) if phases else "n/a"
                rows.append([f"{card} {d.parent.name}/{d.name}", model, str(world), str(len(reps))]
                            + [fmt_spread(over.get(k), 3) for k in OVERHEAD_COLUMNS] + [split])
    return rows
