"""``dreamddp-schedule``: a schedule for a profile, and the modelled iteration times.

    dreamddp-schedule PROFILE_DIR --H 10 [--scheduler dreamddp|optimal|general|enp]
        [--no-bubble] [--out schedule.json] [--workers N --gbps G]
        [--latency-ms MS] [--alpha-ms MS] [--authors-model]
        [--merge-delay D [--late-parts N]]

Schedulers (schedule/make.py): ``dreamddp`` is the paper's DFS over contiguous
splits, ``optimal`` the exact optimum over contiguous splits (both one
collective per unit, then bubble filling), ``general`` any subset of units
per iteration grouped into collectives under the alpha-beta model (each
collective pays ``--alpha-ms``), ``enp`` PLSGD-ENP's equal-count partition.
Writes the schedule in the authors' format (``{"H": H, "schedule": {unit:
iteration or [iterations]}}``, plus ``"collectives"`` for general schedules)
and prints a table of modelled mean iteration times.  ``--authors-model``
schedules the units the authors' model sees and prints their model's numbers;
otherwise our simulator runs every algorithm on the profile's measured comm
times, or with ``--workers/--gbps`` on the ring link model over the profile's
byte counts.  ``--merge-delay D`` writes DreamDDP's plan for
``algo.merge_delay=D`` instead (the scheduler's window, then which collectives
merge late, schedule/delay.py), with its ``"delayed"`` list, exactly as a run
would plan it at start-up on this profile, and adds its modelled row.  Bad
input: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from dreamddp.algorithms import ALGORITHMS, algo_config
from dreamddp.comm.cost import LinkModel
from dreamddp.prediction import layout_of, simulate, simulated_algorithms
from dreamddp.schedule.authors_model import aligned, modelled_times
from dreamddp.schedule.cost import groups
from dreamddp.schedule.make import SCHEDULERS, make_plan, make_schedule
from dreamddp.schedule.profile import load_profile
from dreamddp.schedule.schedule_file import assign_runs, save_schedule


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dreamddp-schedule", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("profile_dir")
    p.add_argument("--H", type=int, default=10, help="synchronisation period (iterations per window)")
    p.add_argument("--scheduler", choices=SCHEDULERS, default="dreamddp",
                   help="dreamddp: the paper's DFS over contiguous splits; optimal: their exact optimum; "
                        "general: any subset per iteration, collectives grouped; enp: PLSGD-ENP's equal counts")
    p.add_argument("--no-bubble", action="store_true", help="skip bubble filling")
    p.add_argument("--overlap-forward", action="store_true",
                   help="plan for algo.overlap_forward=true: each average due at its unit's next forward "
                        "(dreamddp and optimal search under it; general keeps the contiguous optimum "
                        "where that waits less)")
    p.add_argument("--out", default="schedule.json", help="where to write the schedule")
    p.add_argument("--workers", type=int, help="world size for the modelled link (with --gbps)")
    p.add_argument("--gbps", type=float, help="link bandwidth in Gbit/s (with --workers)")
    p.add_argument("--latency-ms", type=float, default=0.0, help="per-hop latency of the modelled link")
    p.add_argument("--alpha-ms", type=float, default=0.0,
                   help="cost of one collective (general scheduler and the modelled link)")
    p.add_argument("--authors-model", action="store_true", help="print the authors' cost model's numbers")
    p.add_argument("--grad-clip", type=float, default=0.0,
                   help="the run's train.grad_clip (0: none): plans that sync for the clip norm (DeAR) include it")
    p.add_argument("--merge-delay", type=int, default=0,
                   help="plan for algo.merge_delay (0: none): which collectives merge late, written as \"delayed\"")
    p.add_argument("--late-parts", type=int, default=4,
                   help="with --merge-delay: algo.late_parts, the most parts a late collective may be cut into")
    return p


def _table(rows: list[tuple[str, float, float | None]], title: str) -> str:
    lines = [title, f"{'algorithm':<20} {'iteration s':>12} {'exposed wait s':>15}"]
    for name, t, w in rows:
        lines.append(f"{name:<20} {t:>12.6f} {'' if w is None else f'{w:15.6f}':>15}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> str:
    if args.H < 1:
        raise ValueError(f"--H must be >= 1, got {args.H}")
    if (args.workers is None) != (args.gbps is None):
        raise ValueError("--workers and --gbps go together")
    if args.workers is not None and args.authors_model:
        raise ValueError("--authors-model uses the profile's measured comm times; drop --workers/--gbps")
    if args.alpha_ms < 0:
        raise ValueError(f"--alpha-ms must be >= 0, got {args.alpha_ms}")
    if args.grad_clip < 0:
        raise ValueError(f"--grad-clip must be >= 0, got {args.grad_clip}")
    if args.overlap_forward and args.authors_model:
        raise ValueError("--authors-model leaves the forward pass out, so it cannot plan for --overlap-forward")
    if not 0 <= args.merge_delay < args.H:
        raise ValueError(f"--merge-delay must be in [0, --H={args.H}), got {args.merge_delay}")
    if args.late_parts < 1:
        raise ValueError(f"--late-parts must be >= 1, got {args.late_parts}")
    if args.merge_delay and (args.authors_model or args.scheduler == "enp"):
        raise ValueError("--merge-delay plans DreamDDP's window: use --scheduler dreamddp, optimal or general, "
                         "without --authors-model")
    profile = load_profile(args.profile_dir)
    bubble, alpha = not args.no_bubble, args.alpha_ms / 1e3
    collectives = delayed = None
    if args.authors_model:
        schedule = make_schedule(aligned(profile), args.H, args.scheduler, bubble, alpha)
        m = modelled_times(profile, args.H, schedule)
        rows = [(k, v, None) for k, v in m["algorithm_times"].items()]
        text = _table(rows, f"authors' model, H={args.H}, mean of 1000 iterations (forward ignored)")
        text += "\n" + "  ".join(f"{k}: {v:.4f}x" for k, v in m["speedups"].items())
    else:
        link, world = None, 2
        profile_for_schedule = profile
        if args.gbps is not None:
            if not profile.nbytes:
                raise ValueError(f"{args.profile_dir}: no nbytes.json, so --workers/--gbps cannot be modelled")
            link, world = LinkModel(args.gbps, args.latency_ms / 1e3, alpha_s=alpha), args.workers
            seconds = {u: link.seconds("all_reduce", profile.nbytes.get(u, 0), world) for u in profile.units}
            profile_for_schedule = replace(profile, comm=seconds)
        schedule, collectives = make_plan(profile_for_schedule, args.H, args.scheduler, bubble, alpha,
                                          args.overlap_forward)
        runs = None
        if collectives is not None:
            runs = assign_runs(collectives, groups(profile, args.H, schedule), profile.units)
        rows = []
        for algo in simulated_algorithms(profile_only=True):
            scheduled = ALGORITHMS[algo].scheduled  # the scheduler's output is theirs
            overlap = {"overlap_forward": True} if scheduled and args.overlap_forward else {}
            r = simulate(algo, profile, H=args.H, schedule=schedule if scheduled else None,
                         runs=runs if scheduled else None, world=world, link=link, grad_clip=args.grad_clip,
                         **overlap)
            rows.append((algo + ("+overlap" if overlap else ""), r.mean_iter, r.mean_wait))
        if args.merge_delay:
            schedule, collectives, delayed, row = _delayed_plan(args, profile, profile_for_schedule, link, world)
            rows.append(row)
        where = f"{args.workers} workers, {args.gbps} Gbit/s" if link else "measured comm times"
        text = _table(rows, f"simulated engine, H={args.H}, {where}, {args.scheduler} schedule")
    save_schedule(args.out, args.H, schedule, collectives, delayed)
    return text + f"\nschedule written to {args.out}"


def _delayed_plan(args, profile, planning, link, world):
    """DreamDDP's plan with ``--merge-delay`` as its set-up makes it on ``planning`` (the profile
    with the link's all-reduce times), and its modelled row: (schedule, collectives, delayed, row)."""
    options = {"scheduler": args.scheduler, "bubble_fill": not args.no_bubble, "overlap_forward": args.overlap_forward,
               "merge_delay": args.merge_delay, "late_parts": args.late_parts}
    cfg = algo_config({"name": "dreamddp", "H": args.H, **options})
    cls = ALGORITHMS.lookup("dreamddp")
    setup = cls.setup_from_profile(cfg, planning, args.alpha_ms / 1e3)
    made = setup["schedule"]
    bound = cls.build(cfg, setup)  # its collectives and late ones as unit indices, as the run binds them
    bound.bind_plan(layout_of(profile, world, args.grad_clip))
    r = simulate(cfg, profile, schedule=made["schedule"], runs=bound.runs, delayed=bound.delayed, world=world,
                 link=link, grad_clip=args.grad_clip)
    label = f"dreamddp{'+overlap' if args.overlap_forward else ''}+delay{args.merge_delay}"
    return made["schedule"], made.get("collectives"), made["delayed"], (label, r.mean_iter, r.mean_wait)


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        print(run(args))
    except (FileNotFoundError, ValueError, OSError) as e:
        print(f"dreamddp-schedule: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
