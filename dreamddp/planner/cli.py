"""``dreamddp-plan``: predict iteration time, compute utilization and the link each algorithm
needs, before you have the hardware.

    dreamddp-plan predict DESCRIPTION.yaml|PROFILE_DIR [--replicas R] [--workers-per-replica W]
        [--gbps G] [--latency-ms MS] [--fast-gbps G] [--fast-latency-ms MS] [--alpha-ms MS]
        [--H 10] [--recipes ...] [--targets 0.5 0.9 0.99] [--fragment-layers 3] [--out DIR]
    dreamddp-plan table4 [--out results/plan/streaming_diloco_table4]

``predict`` prints a markdown table: per recipe, the iteration time and compute utilization
at the cluster's slow-link rate, the bytes each worker sends across replicas per iteration,
and the rate each target utilization needs; ``--out`` also writes README.md, plan.json and
utilization.png (utilization against the rate).  ``table4`` recomputes Streaming DiLoCo's
Table 4 (planner/table4.py).  No torch: a 1,000-worker, 100B-parameter cluster takes seconds.
Bad input: one line on stderr naming the field, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from dreamddp.checks import ConfigError

PROG = "dreamddp-plan"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("predict", help="every recipe on a model description or a measured profile",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    pr.add_argument("input", help="a model description (yaml/json: model, compute, cluster) or a profile directory")
    pr.add_argument("--replicas", type=int, help="R: replicas (sites) on the slow link (default: the file's, else 2)")
    pr.add_argument("--workers-per-replica", type=int, help="W: workers inside a replica, on the fast link")
    pr.add_argument("--gbps", type=float, help="the slow link: each replica's uplink, Gbit/s")
    pr.add_argument("--latency-ms", type=float, help="the slow link's latency per ring hop")
    pr.add_argument("--fast-gbps", type=float, help="inside a replica: each worker's link, Gbit/s")
    pr.add_argument("--fast-latency-ms", type=float, help="inside a replica: latency per ring hop")
    pr.add_argument("--alpha-ms", type=float, help="fixed cost of one collective")
    pr.add_argument("--H", type=int, default=10, help="window / sync period of the periodic algorithms")
    pr.add_argument("--recipes", nargs="+", help="recipes to predict (default: every one of the issue's list)")
    pr.add_argument("--targets", nargs="+", type=float, default=[0.5, 0.9, 0.99],
                    help="compute utilizations to find the needed rate for")
    pr.add_argument("--fragment-layers", type=int, default=3, help="Streaming DiLoCo: blocks per fragment")
    pr.add_argument("--out", help="directory for README.md, plan.json and utilization.png")
    t4 = sub.add_parser("table4", help="Streaming DiLoCo's Table 4 recomputed, beside the published values",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t4.add_argument("--out", default="results/plan/streaming_diloco_table4", help="where the report goes")
    return p


def _cluster_raw(args, base: dict | None) -> dict:
    raw = dict(base or {})
    for flag, key in (("replicas", "replicas"), ("workers_per_replica", "workers_per_replica"),
                      ("alpha_ms", "alpha_ms")):
        if getattr(args, flag) is not None:
            raw[key] = getattr(args, flag)
    for level, gbps, latency in (("slow", "gbps", "latency_ms"), ("fast", "fast_gbps", "fast_latency_ms")):
        given = {k: getattr(args, a) for k, a in (("gbps", gbps), ("latency_ms", latency)) if getattr(args, a) is not None}
        if given:
            raw[level] = {**dict(raw.get(level) or {}), **given}
    return raw


def predict(args, argv: list[str]) -> str:
    from dreamddp.planner import report
    from dreamddp.planner.predict import DEFAULT_RECIPES, RECIPES, Planner
    from dreamddp.planner.spec import cluster_of, model_of, model_of_profile, read_mapping

    src = Path(args.input)
    if src.is_dir():
        model, cluster = model_of_profile(src), cluster_of(_cluster_raw(args, None))
    else:
        data = read_mapping(src)
        unknown = sorted(set(data) - {"model", "compute", "cluster"})
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown section (known: cluster, compute, model)")
        if "model" not in data:
            raise ConfigError("model: missing (the description needs a model section)")
        cluster = cluster_of(_cluster_raw(args, data.get("cluster")))
        model = model_of(data["model"], data.get("compute"), cluster.workers, src.stem)
    recipes = args.recipes or list(DEFAULT_RECIPES)
    for r in recipes:
        if r not in RECIPES:
            raise ConfigError(f"--recipes: unknown recipe {r!r} (known: {', '.join(RECIPES)})")
    for t in args.targets:
        if not 0 < t <= 1:
            raise ConfigError(f"--targets: {t} is not a utilization in (0, 1]")
    if args.fragment_layers < 1:
        raise ConfigError(f"--fragment-layers={args.fragment_layers}: must be >= 1")
    planner = Planner(model, cluster, args.H, args.fragment_layers)
    rows = report.rows(planner, recipes, args.targets)
    c = cluster
    head = (f"{model.name}: {model.total_params:.4g} parameters in {len(model.units)} units, "
            f"{planner.compute_s:.4g} s of compute per iteration; {c.replicas} replicas x {c.workers_per_replica} "
            f"workers, slow link {c.slow.gbps:g} Gbit/s ({c.slow.latency_s * 1e3:g} ms per hop), fast link "
            f"{c.fast.gbps:g} Gbit/s ({c.fast.latency_s * 1e3:g} ms), alpha {c.alpha_s * 1e3:g} ms; H={args.H}")
    text = head + "\n\n" + report.table(rows, args.targets, c.slow.gbps)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        rates = report.rate_grid()
        report.figure(report.curves(planner, recipes, rates), rates, out / "utilization.png", head.split(";")[0])
        command = shlex.join([PROG, *argv])
        (out / "README.md").write_text(f"# dreamddp-plan: {model.name}\n\nMade by `{command}`.\n\n{head}\n\n"
                                       + report.table(rows, args.targets, c.slow.gbps)
                                       + "\n\n![utilization against the slow link](utilization.png)\n")
        (out / "plan.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1,
                                                  default=str) + "\n")
        text += f"\nwritten to {out}"
    return text


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if args.command == "table4":
            from dreamddp.planner.table4 import write_report

            print(write_report(args.out, shlex.join([PROG, *argv])))
        else:
            print(predict(args, argv))
    except (FileNotFoundError, ValueError, OSError) as e:  # ConfigError is a ValueError
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
