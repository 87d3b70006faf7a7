"""results/gpu/README.md: the GPU benchmark's ratios next to the CPU one's and the paper's, and memory.

Part of ``dreamddp-bench gpu --reports``.  Reads the reports' bench.csv (medians over
repetitions, made by dreamddp/bench/report.py) of every ``<gpu>/<device kind>/<job>/``
(``devices``: one folder per kind of device, h200/, h100/, ...) and of the CPU ``make bench``,
and the run records (memory segments, the engine-overhead pairs); writes ``<gpu>/README.md``.
"""

from __future__ import annotations

import csv
from pathlib import Path

from dreamddp.atomic import write_text
from dreamddp.bench import overhead, regime
from dreamddp.reports import bench as report
from dreamddp.reports.spread import fmt_spread

ORDER = ("ssgd", "ascwfbp", "dear", "flsgd", "plsgd_enp", "streaming_diloco", "dreamddp", "dreamddp+overlap",
         "dreamddp+general", "dreamddp+delay")


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
    return {label[: -len("@memory")]: rec["extra"]["memory"]["peak_bytes"]
            for job in jobs for label, rec in job.get(model, {}).get(0, {}).items() if label.endswith("@memory")}


def devices(gpu: Path) -> list[tuple[str, str]]:
    """(card, folder) of every device kind under ``gpu``: a folder holding benchmark jobs."""
    return [(d.name.upper(), d.name) for d in sorted(gpu.iterdir())
            if d.is_dir() and any((job / "runs").is_dir() for job in d.iterdir())] if gpu.is_dir() else []


OVERHEAD_COLUMNS = tuple(overhead.overhead_key(a, b) for a, b in overhead.OVERHEAD)


def job_folders(gpu: Path) -> dict[str, list[Path]]:
    """{card: its benchmark jobs' folders (those holding run records), sorted}."""
    return {card: sorted(d for d in (gpu / sub).iterdir() if (d / "runs").is_dir()) for card, sub in devices(gpu)}


def write(gpu: Path, cpu_dir: Path) -> Path:
    cpu = rows_of(cpu_dir / "bench.csv")
    cpu_jobs = report.load(str(cpu_dir / "runs"))
    folders = job_folders(gpu)
    jobs = {d: report.load(str(d / "runs")) for dirs in folders.values() for d in dirs}
    timed: dict[str, dict] = {card: {} for card in folders}
    for card, dirs in folders.items():
        for d in dirs:
            for key, row in rows_of(d / "bench.csv").items():
                timed[card].setdefault(key, (row, d))
    cards = [card for card in folders if timed[card]]
    lines = ["# The algorithms side by side on one GPU shared by 2 workers, next to the CPU and the paper", "",
             "Made by `dreamddp-bench gpu --reports` from the run records under this folder (`<device>/<job>/runs/`; "
             "each job's own report is `<device>/<job>/README.md`). Each ratio is an algorithm's mean iteration time "
             "over DreamDDP's in the same job (median over the job's repetitions). GPU: paper sizes, TF32; CPU: "
             f"{cpu_dir} (`make bench`, model.size=compute); paper: the authors' cost model on their A6000 "
             "profiles with the paper's 32-GPU multipliers. *bound / measured*: the least time any plan of the "
             "algorithm's kind could take on that job's profile and link, over the measured time. No time is "
             "compared across machines.", ""]
    for model in ("gpt2", "resnet18", "resnet50"):
        found = {card: next((d for (m, _), (_, d) in timed[card].items() if m == model), None) for card in cards}
        if not any(found.values()):
            continue
        lines += [f"## {model}", ""]
        for card, some in found.items():
            if some is None:
                continue
            reps = jobs[some][model]
            first = reps[min(reps)]
            rec = next(iter(first.values()))
            lines += [f"{card}: {len(reps)} repetition{'s' if len(reps) != 1 else ''}, {regime.batch(rec)}. "
                      + regime.emulation(rec, first) + " " + regime.compute_split(first), ""]
        if model in cpu_jobs:
            cpu_first = cpu_jobs[model][min(cpu_jobs[model])]
            lines += [f"CPU: {regime.batch(next(iter(cpu_first.values())))}. " + regime.compute_split(cpu_first), ""]
        ran = [card for card in cards if found[card]]  # the machines that timed this model
        head = "".join(f" {c} x DreamDDP | {c} bound / measured | {c} predicted / measured |" for c in ran)
        lines += [f"| algorithm |{head} CPU x DreamDDP | CPU bound / measured | paper x DreamDDP (modelled) |",
                  "|---|" + "---|" * (3 * len(ran) + 3)]
        for algo in ORDER:
            g = {card: timed[card].get((model, algo), (None, None))[0] for card in ran}
            c = cpu.get((model, algo))
            paper = next((row for row in g.values() if row is not None), None)
            cells = "".join(f" {fmt(g[card], 'x_dreamddp')} | {fmt(g[card], 'bound_over_measured')} | "
                            f"{fmt(g[card], 'predicted_over_measured')} |" for card in ran)
            lines.append(f"| {algo} |{cells} {fmt(c, 'x_dreamddp')} | {fmt(c, 'bound_over_measured')} | "
                         f"{fmt(paper, 'paper_x_dreamddp')} |")
        lines.append("")
    lines += overhead_table(folders, jobs)
    # the jobs that measured memory need not be those whose times the tables above show
    benches = [d for dirs in folders.values() for d in dirs]
    per_job = {(model, d): memory([jobs[d]], model) for model in ("gpt2", "llama2")
               for d in benches if d.name.startswith(model)}
    sources = {model: [d for d in benches if per_job.get((model, d))] for model in ("gpt2", "llama2")}
    lines += ["## Peak GPU memory per worker", "",
              "torch.cuda.max_memory_allocated of rank 0 during each algorithm's training loop, less what its "
              "process held before (repetition 0), from the jobs that measured it: "
              + "; ".join(f"{model} {', '.join(f'{d.parent.name}/{d.name}' for d in dirs)}"
                          for model, dirs in sources.items() if dirs) + ".", "",
              "| model | algorithm | peak MiB | x plain |", "|---|---|---|---|"]
    for model, dirs in sources.items():
        mem = {algo: peak for d in dirs for algo, peak in per_job[(model, d)].items()}
        plain = mem.get("plain@ideal")
        for algo in sorted(mem):
            ratio = f"{mem[algo] / plain:.3f}" if plain else "n/a"
            lines.append(f"| {model} | {algo} | {mem[algo] / 2**20:.1f} | {ratio} |")
    write_text(gpu / "README.md", "\n".join(lines) + "\n")
    return gpu / "README.md"


def overhead_table(folders: dict, jobs: dict) -> list[str]:
    """The engine's overhead on the ideal link, every job that measured it: S-SGD and ASC-WFBP
    against DDP, nosync against plain, each ratio inside one repetition, median (spread)."""
    lines = ["## Engine overhead on the ideal link", "",
             "Iteration time ratios inside each repetition, median (min-max) over the job's repetitions. S-SGD all-reduces after backward by "
             "definition; DDP all-reduces its buckets during backward, as ASC-WFBP does (the like-for-like "
             "pair); DDP with one bucket (ddp+1bucket) all-reduces after backward, as S-SGD does (its "
             "like for like). Last column: where nosync's time differs from plain's, by phase (medians over the "
             "repetitions; spreads in the job's README): its hooks run in backward, its flat zeroing and "
             "accounting in the rest, nothing of it in forward, whose difference is the phases' own noise.", "",
             "| job | model | workers | repetitions | " + " | ".join(OVERHEAD_COLUMNS)
             + " | nosync less plain, ms: forward / backward / rest |",
             "|---|---|---|---|" + "---|" * len(OVERHEAD_COLUMNS) + "---|"]
    for card, dirs in folders.items():
        for d in dirs:
            for model, reps in jobs[d].items():
                over = overhead.engine_overhead(reps)
                if not any(over.values()):
                    continue
                world = next(iter(next(iter(reps.values())).values()))["extra"]["world_size"]
                cells = " | ".join(fmt_spread(over.get(k), 3) for k in OVERHEAD_COLUMNS)
                phases = overhead.phase_overhead(reps)
                split = " / ".join(f"{v[0]:+.2f}" for v in phases.values()) if phases else "n/a"
                lines.append(f"| {card} {d.parent.name}/{d.name} | {model} | {world} | {len(reps)} | {cells} | {split} |")
    return lines + [""]
