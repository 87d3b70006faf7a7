"""``dreamddp-bench run runners/<study>.yaml``: every job of a study, then its reports.

    dreamddp-bench run runners/quickstart.yaml                  # make run
    dreamddp-bench run runners/headline.yaml --dry-run          # every job, and whether --resume keeps it
    dreamddp-bench run runners/headline.yaml --resume           # keep the jobs completed with the same spec and code
    dreamddp-bench run runners/headline.yaml --only flsgd dreamddp nosync@ideal plain@ideal --reps 1
    dreamddp-bench report runners/methods.yaml                  # its reports again from the committed records

Per part, repetition and model (alternating order per repetition) one job (jobs.py); on the tc link
every run its own job beside its emulated twin (separate.py).  Every run of every job is composed
and checked before the first starts, so a bad field or override is refused in one line.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

from dreamddp.atomic import write_json
from dreamddp.bench import jobs, study_reports
from dreamddp.study import Part, Study, StudyError, catalogue_presets, load

QUICK = {"iterations": 12, "calibration_iterations": 6, "profile_iterations": 2}  # with the tiny presets
STAND_IN = {"gbps": 1.0, "iteration_s": 0.1}  # a calibration's fields, any valid values (check_configs)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dreamddp-bench run", description=__doc__.split("\n\n")[0])
    p.add_argument("study", help="a study file, runners/<study>.yaml")
    p.add_argument("--dry-run", action="store_true",
                   help="list every job (and whether --resume keeps it); run nothing")
    p.add_argument("--resume", action="store_true",
                   help="keep the jobs completed in --out with the same spec and code; run the rest")
    p.add_argument("--out", help="the study's output folder (default: the file's out)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="overrides for every run, after the file's")
    p.add_argument("--only", nargs="+", metavar="LABEL", help="these runs of the study only")
    p.add_argument("--parts", nargs="+", metavar="NAME", help="these parts of the study only")
    p.add_argument("--models", nargs="+", metavar="MODEL", help="these models of the study only")
    p.add_argument("--reps", type=int, help="repetitions (default: the file's)")
    p.add_argument("--quick", action="store_true", help="tiny models and few iterations: a smoke run of the pipeline")
    p.add_argument("--no-report", action="store_true", help="the jobs only (dreamddp-bench report makes the reports)")
    p.add_argument("--port", type=int, default=29400, help="rendezvous port of repetition 0 (k: + k)")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.reps is not None and args.reps < 1:
        p.error(f"--reps {args.reps}: must be >= 1")
    return args


def select(study: Study, args: argparse.Namespace) -> Study:
    """The study as the command line narrows it (parts, models, runs, repetitions, --set, --quick)."""
    def check(flag: str, asked, have: list[str]) -> None:
        bad = next((x for x in asked or () if x not in have), None)
        if bad is not None:
            raise StudyError(f"{flag} {bad}: not in {study.path} (have {', '.join(have) or 'none'})")

    check("--parts", args.parts, [p.name for p in study.parts])
    parts = [p for p in study.parts if not args.parts or p.name in args.parts]
    check("--only", args.only, list(dict.fromkeys(r.label for p in parts for r in p.runs)))
    check("--models", args.models, list(dict.fromkeys(m.name for p in parts for m in p.models)))
    tiny = catalogue_presets()
    out = []
    for part in parts:
        runs = tuple(r for r in part.runs if not args.only or r.label in args.only)
        orphan = next((r for r in runs if r.schedule_from and r.schedule_from not in [x.label for x in runs]), None)
        if orphan:
            raise StudyError(f"--only {orphan.label}: runs on {orphan.schedule_from}'s schedule, so name "
                             f"{orphan.schedule_from} too")
        ms = tuple(m for m in part.models if not args.models or m.name in args.models)
        regime = replace(part.regime, set=part.regime.set + tuple(args.set))
        if args.quick:
            missing = next((m.name for m in ms if "tiny" not in tiny[m.name]), None)
            if missing:
                raise StudyError(f"--quick: no tiny preset of {missing} in runners/catalogue/presets.yaml")
            ms = tuple(replace(m, overrides=tiny[m.name]["tiny"]["overrides"]) for m in ms)
            regime = replace(regime, **QUICK)
        if runs and ms:
            out.append(replace(part, runs=runs, models=ms, regime=regime, reps=args.reps or part.reps))
    return replace(study, parts=tuple(out), out=args.out or study.out)


def made_by(study: Study, args: argparse.Namespace) -> str:
    """The command that made the study, as given (less what does not change what it makes)."""
    argv = [a for a in args.argv if a not in ("--resume", "--dry-run")]
    if "--out" in argv and argv[argv.index("--out") + 1:argv.index("--out") + 2] == [load(study.path).out]:
        del argv[argv.index("--out"):argv.index("--out") + 2]
    return shlex.join(["dreamddp-bench", "run", *argv])


def part_out(study: Study, part: Part) -> str:
    return os.path.join(study.out, part.out)


def job_list(study: Study, part: Part, reps=None) -> list[tuple[str, int, dict]]:
    """(model, repetition, spec) of every job of ``part`` in running order."""
    runs = os.path.join(part_out(study, part), "runs")
    return [(model.name, rep, jobs.job_spec(part, model, rep, os.path.join(runs, model.name, f"rep{rep}")))
            for rep in (range(part.reps) if reps is None else reps)
            for model in (part.models if rep % 2 == 0 else part.models[::-1])]


def check_configs(study: Study, extra_set: list[str]) -> None:
    """Compose and validate every run of every job before any starts, refused as ``dreamddp-run``
    refuses (``error: <one line>``, status 2) naming the model, the run and the field.  The
    calibration's rate is known only in the job (STAND_IN); another run's schedule is not there yet."""
    from dreamddp.bench.segments import calibration_overrides, segment_overrides
    from dreamddp.bench.separate import link_overrides
    from dreamddp.checks import refuse
    from dreamddp.cli import check_group_options
    from dreamddp.config import CONFIG_NAME, ConfigError, conf_dir, validate
    from dreamddp.config.overrides import compose_checked

    check_group_options(list(extra_set), conf_dir())  # data=nope: refused with the options there are
    for part in study.parts:
        for model in part.models:
            spec = jobs.job_spec(part, model, 0, os.path.join(part_out(study, part), "runs", model.name, "rep0"))
            timed = [(s, segment_overrides(spec, s, STAND_IN, schedule=False)) for s in spec["segments"]]
            runs = [("calibration", calibration_overrides(spec)), *((s["label"], o) for s, o in timed)]
            if part.regime.link == "tc":  # the shaped twin of every run on a link (its host checks: root, tbf)
                runs += [(f"{s['label']} (tc)", [x for x in o if not x.startswith(("bandwidth=", "bandwidth.gbps="))]
                          + link_overrides("tc", 1.0)) for s, o in timed if s["link"] == "emulated"]
            for label, overrides in runs:
                try:
                    validate(compose_checked(conf_dir(), CONFIG_NAME, overrides))
                except ConfigError as exc:
                    refuse(f"{part.name + ' ' if part.name else ''}{model.name} {label}: {exc}")


def bench_json(study: Study, part: Part, args, seconds: float, path: str | os.PathLike) -> dict:
    """``path`` (runs/bench.json): what made the records (``args``: the fields the reports read, and the
    rest of the regime) and the seconds its jobs took: with --resume, added to those already there."""
    if args.resume and os.path.isfile(path):
        seconds += json.loads(Path(path).read_text()).get("seconds") or 0.0
    r = part.regime
    return {"study": study.path, "part": part.name, "made_by": made_by(study, args),
            "args": {"preset": "+".join(dict.fromkeys(m.preset for m in part.models)),
                     "models": [m.name for m in part.models], "reps": part.reps, "nproc": r.nproc, "H": r.H,
                     "chunk": r.chunk, "ratio": float(r.ratio), "latency_ms": float(r.latency_ms), "link": r.link,
                     "iterations": r.iterations, "calibration_iterations": r.calibration_iterations,
                     "profile_iterations": r.profile_iterations, "no_memory": not r.memory,
                     "only": [x.label for x in part.runs], "set": list(r.set)},
            "seconds": seconds}


def run_part(study: Study, part: Part, args, reps=None) -> None:
    if part.regime.link == "tc":
        from dreamddp.bench import separate

        separate.run_separate(study, part, args, bench_json)
        return
    start = time.perf_counter()
    for model, rep, spec in job_list(study, part, reps):
        name = f"bench: {part.name + ' ' if part.name else ''}{model} repetition {rep}"
        why = jobs.job_state(spec) if args.resume else "not resumed"
        if why is None:
            print(f"{name}: completed before, kept", flush=True)
            continue
        if args.resume:
            print(f"{name}: runs again ({why})", flush=True)
        print(f"{name}: {jobs.job(spec, part.regime.nproc, rep, args.port):.0f} s", flush=True)
    runs = os.path.join(part_out(study, part), "runs")
    os.makedirs(runs, exist_ok=True)
    path = os.path.join(runs, "bench.json")
    write_json(path, bench_json(study, part, args, time.perf_counter() - start, path))


def dry_run(study: Study) -> list[str]:
    """One block per job: part, model, repetition, out folder, whether --resume keeps it, its runs in order."""
    lines = [f"{study.path}: {study.about}"]
    if study.runner == "gpu":
        lines.append(f"(runner gpu: steps {', '.join(study.settings['steps'])} under {study.settings['budget_s']:g} s; "
                     f"each part's records under <out>/<device>/<part>/)")
    for part in study.parts:
        r = part.regime
        lines.append(f"part {part.name or '-'} -> {part_out(study, part)} (link {r.link}, ratio {r.ratio:g}, "
                     f"latency {r.latency_ms:g} ms, H {r.H}, nproc {r.nproc}, {part.reps} repetition(s))")
        if r.link == "tc":
            from dreamddp.bench import separate

            lines += separate.dry_run(study, part)
            continue
        for model, rep, spec in job_list(study, part):
            why = jobs.job_state(spec)
            lines.append(f"  {model} rep{rep} -> {spec['out']}: "
                         + ("--resume keeps it" if why is None else f"runs ({why})"))
            lines.append("    " + " ".join(s["label"] for s in spec["segments"])
                         + (" (+ memory runs)" if spec["memory"] else ""))
    lines += [f"report {rep.kind} -> {os.path.normpath(os.path.join(study.out, rep.out))}" for rep in study.reports]
    return lines


def run(study: Study, args) -> None:
    from dreamddp.reports.card import print_card

    start = time.perf_counter()
    if study.interleave_parts:  # repetition k of every part before any part's k+1
        for k in range(max((p.reps for p in study.parts), default=0)):
            for part in study.parts:
                if k < part.reps:
                    run_part(study, part, args, reps=[k])
    else:
        for part in study.parts:
            run_part(study, part, args)
            # the result card of the part's timed runs (the real link's on tc)
            out = part_out(study, part)
            try:  # a card refused (records of other code kept by --resume) must not stop the next parts
                print_card([os.path.join(out, "tc/runs" if part.regime.link == "tc" else "runs")],
                           os.path.join(out, "loss_vs_time.png"))
            except SystemExit as refused:
                print(f"bench: no card for part {part.name or '-'}: {refused}", file=sys.stderr)
    if not args.no_report:
        for path in study_reports.write_all(study, made_by(study, args), seconds=time.perf_counter() - start):
            print(f"bench: {path}")
    print(f"bench: {study.path} done ({time.perf_counter() - start:.0f} s in all)")


def _refused(exc: StudyError) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        study = select(load(args.study), args)
    except StudyError as exc:
        return _refused(exc)
    if args.dry_run:
        print("\n".join(dry_run(study)))
        return 0
    if study.runner == "gpu" and not args.parts:  # its steps; --parts runs parts as any study's
        from dreamddp.bench import gpu

        return gpu.measure(study, args.out or study.out, float(study.settings["budget_s"]),
                           list(study.settings["steps"]), args.quick)
    check_configs(study, args.set)
    run(study, args)
    return 0


def report_main(argv=None) -> int:
    """``dreamddp-bench report runners/<study>.yaml``: its reports from the committed records
    (``report DIR``: one folder's, as dreamddp-bench run wrote it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].endswith((".yaml", ".yml")) and not argv[0].startswith("-"):
        from dreamddp.reports import rebuild

        return rebuild.main(argv)
    p = argparse.ArgumentParser(prog="dreamddp-bench report", description=report_main.__doc__.split("\n")[0])
    p.add_argument("study", help="a study file, runners/<study>.yaml, or a folder dreamddp-bench run wrote")
    p.add_argument("--out", help="the study's output folder (default: the file's out)")
    p.add_argument("--mix", action="store_true",
                   help="report records made by different code (each report's header lists the commits)")
    args = p.parse_args(argv)
    try:
        study = load(args.study)
    except StudyError as exc:
        return _refused(exc)
    for path in study_reports.write_all(replace(study, out=args.out or study.out), None, mix=args.mix):
        print(path)
    return 0
