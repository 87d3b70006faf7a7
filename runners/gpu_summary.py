"""results/gpu/side_by_side.md: the GPU benchmark's ratios next to the CPU one's and the paper's, and memory.

    python runners/gpu_summary.py [--gpu results/gpu] [--cpu results/bench]

Reads the reports' bench.csv (medians over repetitions, made by runners/bench_report.py)
of every ``<gpu>/bench/<name>/`` and of the CPU ``make bench``, and the memory segments'
run records; writes ``<gpu>/side_by_side.md``.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import bench_report

from dreamddp.atomic import write_text

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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gpu", default="results/gpu")
    p.add_argument("--cpu", default="results/bench")
    args = p.parse_args(argv)
    gpu, cpu = Path(args.gpu), rows_of(Path(args.cpu) / "bench.csv")
    cpu_jobs = bench_report.load(str(Path(args.cpu) / "runs"))
    benches = sorted(d for d in (gpu / "bench").iterdir() if (d / "bench.csv").is_file())
    jobs = {d: bench_report.load(str(d / "runs")) for d in benches}
    timed = {}
    for d in benches:
        for key, row in rows_of(d / "bench.csv").items():
            timed.setdefault(key, (row, d))
    lines = ["# The algorithms side by side: one H200 shared by 2 workers, next to the CPU and the paper", "",
             "Each ratio is an algorithm's mean iteration time over DreamDDP's in the same job (median over the "
             "job's repetitions), comm/backward 7, H=10. GPU: results/gpu/bench/<model>/ (TF32, paper sizes); "
             "CPU: results/bench/ (`make bench`, model.size=compute, 2 workers on 2 cores); paper: the authors' "
             "cost model on their A6000 profiles with the paper's 32-GPU multipliers. *bound / measured*: the "
             "least time any plan of the algorithm's kind could take on that job's profile and link, over "
             "the measured time (bench/<model>/README.md). Made by "
             "`python runners/gpu_summary.py`.", "",
             "The GPU jobs here ran before the emulated link waited for the device (dreamddp/comm/ready.py): "
             "their transfers were modelled from the host's launch, which ran ahead of the device "
             "(host_lead.md), so where an algorithm syncs during backward its GPU time is short by up to that "
             "lead: a GPU bound / measured above 1 is that, and DreamDDP's GPU time being short, the ratio over it of "
             "an algorithm that syncs after the step (FLSGD) is high by up to as much.",
             ""]
    for model in ("gpt2", "resnet18", "resnet50"):
        some = next((d for (m, _), (_, d) in timed.items() if m == model), None)
        if some is None:
            continue
        reps = jobs[some][model]
        first = reps[min(reps)]
        lines += [f"## {model}", "", f"GPU: {len(reps)} repetition{'s' if len(reps) != 1 else ''}. "
                  + bench_report._emulation(next(iter(first.values())), first) + " " + bench_report._split(first)]
        if model in cpu_jobs:
            cpu_first = cpu_jobs[model][min(cpu_jobs[model])]
            lines += ["", "CPU: " + bench_report._split(cpu_first)]
        lines += ["",
                  "| algorithm | GPU x DreamDDP | GPU bound / measured | GPU predicted / measured | CPU x DreamDDP | "
                  "CPU bound / measured | paper x DreamDDP (modelled) |", "|---|---|---|---|---|---|---|"]
        for algo in ORDER:
            g = timed.get((model, algo), (None, None))[0]
            c = cpu.get((model, algo))
            lines.append(f"| {algo} | {fmt(g, 'x_dreamddp')} | {fmt(g, 'bound_over_measured')} | "
                         f"{fmt(g, 'predicted_over_measured')} | {fmt(c, 'x_dreamddp')} | "
                         f"{fmt(c, 'bound_over_measured')} | {fmt(g, 'paper_x_dreamddp')} |")
        lines.append("")
    # the jobs that measured memory need not be those whose times the tables above show
    per_job = {(model, d): memory([jobs[d]], model) for model in ("gpt2", "llama2")
               for d in benches if d.name.startswith(model)}
    sources = {model: [d for d in benches if per_job.get((model, d))] for model in ("gpt2", "llama2")}
    lines += ["## Peak GPU memory per worker", "",
              "torch.cuda.max_memory_allocated of rank 0 during each algorithm's training loop, less what its "
              "process held before (repetition 0), from the jobs that measured it: "
              + "; ".join(f"{model} bench/{', bench/'.join(d.name for d in dirs)}"
                          for model, dirs in sources.items() if dirs) + ".", "",
              "| model | algorithm | peak MiB | x plain |", "|---|---|---|---|"]
    for model, dirs in sources.items():
        mem = {algo: peak for d in dirs for algo, peak in per_job[(model, d)].items()}
        plain = mem.get("plain@ideal")
        for algo in sorted(mem):
            ratio = f"{mem[algo] / plain:.3f}" if plain else "n/a"
            lines.append(f"| {model} | {algo} | {mem[algo] / 2**20:.1f} | {ratio} |")
    write_text(gpu / "side_by_side.md", "\n".join(lines) + "\n")
    print(f"{gpu / 'side_by_side.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
