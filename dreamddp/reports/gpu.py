"""results/gpu/README.md (``dreamddp-bench gpu --reports``): the GPU benchmark's ratios next to the
CPU one's and the paper's, the engine's overhead and memory, from every ``<gpu>/<device>/<job>/``'s
bench.csv (dreamddp/reports/bench.py) and run records and the CPU ``make bench``'s."""

from __future__ import annotations

import csv
from pathlib import Path

from dreamddp.reports import overhead, regime
from dreamddp.reports.labels import TIMED
from dreamddp.reports import bench as report
from dreamddp.reports import card as result_card
from dreamddp.reports import records, versions
from dreamddp.reports.render import table, write_readme
from dreamddp.reports.spread import fmt_spread

OVERHEAD_COLUMNS = tuple(overhead.overhead_key(a, b) for a, b in overhead.OVERHEAD)
RATIOS = ("x DreamDDP", "bound / measured", "predicted / measured")


def rows_of(csv_path: Path) -> dict[tuple[str, str], dict]:
    if not csv_path.is_file():
        return {}
    with open(csv_path) as f:
        return {(r["model"], r["algorithm"]): r for r in csv.DictReader(f)}


def fmt(row: dict | None, key: str, digits: int = 2) -> str:
    if row is None or row.get(key) in (None, "", "None"):
        return "n/a"
    return f"{float(row[key]):.{digits}f}"


def memory(job: dict, model: str) -> dict[str, float]:
    """Peak bytes per algorithm from the memory segments of ``model``'s repetition 0 in ``job``."""
    return {label[: -len("@memory")]: rec.peak_bytes
            for label, rec in job.get(model, {}).get(0, {}).items() if label.endswith("@memory")}


def job_folders(gpu: Path) -> dict[str, list[Path]]:
    """{card (H200, ...): its benchmark jobs' folders (those holding run records), sorted}."""
    kinds = {d.name.upper(): sorted(job for job in d.iterdir() if (job / "runs").is_dir())
             for d in (sorted(gpu.iterdir()) if gpu.is_dir() else []) if d.is_dir()}
    return {card: jobs for card, jobs in kinds.items() if jobs}


def _models(cards: dict, jobs: dict, cpu_dir: Path) -> tuple[list[dict], list[dict]]:
    """The result card's blocks (per model and card: the job whose ratios the tables show), and per
    model: each card's regime and the table of its ratios beside the CPU's and the paper's."""
    cpu, cpu_jobs = rows_of(cpu_dir / "bench.csv"), report.load(str(cpu_dir / "runs"))
    timed = {card: {} for card in cards}  # {card: {(model, algo): (bench.csv row, job folder)}}, first job wins
    for card, dirs in cards.items():
        for d in dirs:
            for key, row in rows_of(d / "bench.csv").items():
                timed[card].setdefault(key, (row, d))
    models, blocks = [], []
    for model in ("gpt2", "resnet18", "resnet50"):
        found = {card: next((d for (m, _), (_, d) in t.items() if m == model), None) for card, t in timed.items() if t}
        ran = [card for card, d in found.items() if d]  # the machines that timed this model
        if not ran:
            continue
        regimes = []
        for card in ran:
            reps = jobs[found[card]][model]
            shown = [r for segs in reps.values() for r in segs.values() if r.label in TIMED]
            blocks += [{**block, "caption": f"{card}, {found[card].parent.name}/{found[card].name}: {block['caption']}"}
                       for block in result_card.card_tables(shown)]
            first = reps[min(reps)]
            rec = next(iter(first.values()))
            regimes.append((card, len(reps), regime.batch(rec), regime.emulation(rec, first)
                            + " " + regime.compute_split(first)))
        cpu_regime = None
        if model in cpu_jobs:
            cpu_first = cpu_jobs[model][min(cpu_jobs[model])]
            cpu_regime = f"{regime.batch(next(iter(cpu_first.values())))}. " + regime.compute_split(cpu_first)
        rows = []
        for algo in records.ordered(a for card in ran for (m, a) in timed[card] if m == model):
            g = {card: timed[card].get((model, algo), (None, None))[0] for card in ran}
            c = cpu.get((model, algo))
            paper = next((row for row in g.values() if row is not None), None)
            rows.append([algo] + [fmt(g[card], k) for card in ran for k in ("x_dreamddp", "bound_over_measured",
                                                                              "predicted_over_measured")]
                        + [fmt(c, "x_dreamddp"), fmt(c, "bound_over_measured"), fmt(paper, "paper_x_dreamddp")])
        header = ["algorithm"] + [f"{c} {k}" for c in ran for k in RATIOS]
        models.append({"name": model, "regimes": regimes, "cpu": cpu_regime,
                       "table": table(header + ["CPU x DreamDDP", "CPU bound / measured", "paper x DreamDDP (modelled)"], rows)})
    return blocks, models


def overhead_table(cards: dict, jobs: dict) -> list[list[str]]:
    """The engine's overhead on the ideal link in every job that measured it, median (spread)."""
    rows = []
    for card, dirs in cards.items():
        for d in dirs:
            for model, reps in jobs[d].items():
                over = overhead.engine_overhead(reps)
                if not any(over.values()):
                    continue
                world = next(iter(next(iter(reps.values())).values())).world
                phases = overhead.phase_overhead(reps)
                split = " / ".join(f"{v[0]:+.2f}" for v in phases.values()) if phases else "n/a"
                rows.append([f"{card} {d.parent.name}/{d.name}", model, str(world), str(len(reps))]
                            + [fmt_spread(over.get(k), 3) for k in OVERHEAD_COLUMNS] + [split])
    return rows


def write(gpu: Path, cpu_dir: Path, *, title: str | None = None, made_by: str | None = None,
          mix: bool = False) -> list[str]:
    cards = job_folders(gpu)
    benches = [d for dirs in cards.values() for d in dirs]
    mixed, code = versions.check_provenance([r for d in benches for r in records.bench(d / "runs").records()]
                                     + records.bench(cpu_dir / "runs").records(), mix, f"report {gpu}")
    jobs = {d: report.load(str(d / "runs")) for d in benches}
    # the jobs that measured memory need not be those whose times the tables show
    peaks, sources = [], {}
    for model in ("gpt2", "llama2"):
        per_job = {d: memory(jobs[d], model) for d in benches if d.name.startswith(model)}
        mem = {algo: peak for found in per_job.values() for algo, peak in found.items()}
        plain = mem.get("plain@ideal")
        peaks += [(model, algo, mem[algo] / 2**20, mem[algo] / plain if plain else None) for algo in sorted(mem)]
        if any(per_job.values()):
            sources[model] = [f"{d.parent.name}/{d.name}" for d, found in per_job.items() if found]
    blocks, models = _models(cards, jobs, cpu_dir)
    readme = write_readme(gpu, "gpu.md.j2", title=title or "The algorithms side by side on one GPU shared by 2 workers, "
                          "next to the CPU and the paper", mixed=mixed, code=code, made_by=made_by or "dreamddp-bench gpu --reports",
                          cpu_dir=cpu_dir, cards=blocks, models=models, overhead=overhead_table(cards, jobs),
                          overhead_columns=OVERHEAD_COLUMNS, peaks=peaks, memory_sources=sources)
    return [readme]
