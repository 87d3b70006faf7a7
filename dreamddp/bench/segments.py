"""The segments of a benchmark job, named once: dreamddp/bench/jobs.py runs them, dreamddp/bench/report.py
reads their records by these labels.  A segment is one algorithm's run in the job (its overrides and
link); the timed ones share the emulated link, the engine-overhead ones run on the ideal link, and an
opt-in one runs only where ``--only`` names it."""

from __future__ import annotations

import os
import statistics


ONE_BUCKET_MB = 1_000_000  # DDP's bucket cap that no model here reaches (1 TB)
WINDOW = 1.1  # flsgd_timed's window over H calibrated full-speed iterations (fixed before make bench-unequal ran)


def segments(bucket_mb: float) -> list[dict]:
    """The timed segments on the emulated link, then the engine-overhead ones on the ideal link."""
    def seg(label, overrides, link="emulated", **kw):
        return {"label": label, "overrides": overrides, "link": link, **kw}

    buckets = f"algo.bucket_mb={bucket_mb}"
    return [
        seg("ssgd", ["algo=ssgd"]),
        seg("ascwfbp", ["algo=ascwfbp", buckets]),
        seg("dear", ["algo=dear", buckets]),
        seg("flsgd", ["algo=flsgd"]),
        seg("plsgd_enp", ["algo=plsgd_enp"]),
        seg("streaming_diloco", ["algo=streaming_diloco"]),
        seg("dreamddp", ["algo=dreamddp"]),
        # opt-in: overlap_forward on DreamDDP's own schedule, planned for the end of backward (what
        # dreamddp+overlap ran before the scheduler planned for its deadlines): the plan's share
        seg("dreamddp+overlap+same-schedule", ["algo=dreamddp", "algo.overlap_forward=true"],
            schedule_from="dreamddp", opt_in=True),
        seg("dreamddp+overlap", ["algo=dreamddp", "algo.overlap_forward=true"]),
        # opt-in: overlap_forward with its real collectives started at launch (eager) or at the first
        # wait, in the next forward (deferred), where carrier=auto starts them as the iteration ends
        seg("dreamddp+overlap+eager", ["algo=dreamddp", "algo.overlap_forward=true", "bandwidth.carrier=eager"],
            opt_in=True),
        seg("dreamddp+overlap+deferred", ["algo=dreamddp", "algo.overlap_forward=true", "bandwidth.carrier=deferred"],
            opt_in=True),
        seg("dreamddp+general", ["algo=dreamddp", "algo.scheduler=general"]),
        # opt-in: one collective per unit whatever a collective costs (the paper's plan), beside
        # dreamddp, which fuses units where the link's cost per collective makes that pay
        seg("dreamddp+nofuse", ["algo=dreamddp", "algo.fuse=false"], opt_in=True),
        seg("dreamddp+delay", ["algo=dreamddp", "algo.merge_delay=1"]),
        # opt-in (--only names it): the delayed merge with its real collectives started at launch,
        # so the late average has an iteration of slack for the slowest rank (results/bench_carrier)
        seg("dreamddp+delay+eager", ["algo=dreamddp", "algo.merge_delay=1", "bandwidth.carrier=eager"], opt_in=True),
        # opt-in: the late averages started, merged, when the iteration ends (the step carrier)
        seg("dreamddp+delay+step", ["algo=dreamddp", "algo.merge_delay=1", "bandwidth.carrier=step"], opt_in=True),
        # opt-in: the late averages carried at the next wait (carrier=auto picks step for them on a CPU)
        seg("dreamddp+delay+deferred", ["algo=dreamddp", "algo.merge_delay=1", "bandwidth.carrier=deferred"],
            opt_in=True),
        # opt-in: the delayed merge composed with overlap_forward (the averages merged in place land
        # in the next forward, the late ones an iteration later): against each alone on ResNet-18,
        # where overlap_forward alone is about as fast as the delayed merge (results/bench_delay_overlap)
        seg("dreamddp+overlap+delay", ["algo=dreamddp", "algo.overlap_forward=true", "algo.merge_delay=1"],
            opt_in=True),
        # opt-in: the delayed merge with no late collective cut into parts (as before algo.late_parts)
        seg("dreamddp+delay+whole", ["algo=dreamddp", "algo.merge_delay=1", "algo.late_parts=1"], opt_in=True),
        # opt-in: waits held (the core kept busy through the modelled transfer, not slept): whether the
        # compute after a wait is slower for the core's idle spell
        seg("dreamddp+hold", ["algo=dreamddp", "bandwidth.hold_core=true"], opt_in=True),
        seg("flsgd+hold", ["algo=flsgd", "bandwidth.hold_core=true"], opt_in=True),
        # opt-in: the methods the field moved to, on the same engine (docs/algorithms.md): DreamDDP
        # with its syncs compressed (top-k 1 % with fp16 values, 4-bit blocks; error feedback), the
        # recipes of conf/algo (DiLoCo, its eager one-step-late variant, SparseLoCo, DeMo's codec,
        # layer-wise DiLoCo and SparseLoCo on DreamDDP's schedule), and Streaming DiLoCo's 4-bit path
        seg("dreamddp+topk", ["algo=dreamddp", "algo.compress=topk", "algo.compress_ratio=0.01"], opt_in=True),
        seg("dreamddp+q4", ["algo=dreamddp", "algo.compress=quant", "algo.compress_bits=4"], opt_in=True),
        # (the earlier wave's names for these compositions, which its committed records carry)
        seg("dreamddp+nesterov", ["algo=dreamddp", "algo.outer_optimizer=nesterov"], opt_in=True),
        seg("flsgd+nesterov", ["algo=flsgd", "algo.outer_optimizer=nesterov"], opt_in=True),
        seg("flsgd+nesterov+late", ["algo=flsgd", "algo.outer_optimizer=nesterov", "algo.timing=late"], opt_in=True),
        seg("diloco", ["algo=diloco"], varies="flsgd", opt_in=True),
        seg("diloco_eager", ["algo=diloco_eager"], varies="diloco", opt_in=True),
        seg("sparseloco", ["algo=sparseloco"], varies="flsgd", opt_in=True),
        seg("demo", ["algo=demo"], varies="ssgd", opt_in=True),
        seg("dreamddp_diloco", ["algo=dreamddp_diloco"], varies="dreamddp", opt_in=True),
        seg("dreamddp_sparseloco", ["algo=dreamddp_sparseloco"], varies="dreamddp", opt_in=True),
        seg("streaming_diloco+e3m0", ["algo=streaming_diloco", "algo.compress=e3m0"], opt_in=True),
        # opt-in: FLSGD over a window of fixed wall-clock length (make bench-unequal), the window
        # WINDOW x H full-speed iterations of the calibration: the full-speed worker takes its H
        # steps with a margin for the host's noise, a worker of speed s about s x H
        seg("flsgd_timed", ["algo=flsgd_timed"], window=WINDOW, varies="flsgd", opt_in=True),
        seg("ddp@ideal", ["algo=ddp"], "ideal", memory=False),
        seg("ssgd@ideal", ["algo=ssgd"], "ideal", memory=False),
        # opt-in: S-SGD's like for like, DDP with one bucket (a cap above any model's size), so its one
        # all-reduce starts once backward has made every gradient, as S-SGD's does
        seg("ddp+1bucket@ideal", ["algo=ddp", f"algo.bucket_cap_mb={ONE_BUCKET_MB}"], "ideal", memory=False,
            opt_in=True),
        # opt-in: DDP's like for like (buckets all-reduced as backward makes them), where S-SGD
        # all-reduces after backward by definition
        seg("ascwfbp@ideal", ["algo=ascwfbp", buckets], "ideal", memory=False, opt_in=True),
        seg("nosync@ideal", ["algo=nosync"], "ideal"),
        seg("plain@ideal", ["algo=plain"], "ideal"),
    ]


_ALL = segments(1.0)  # the labels and their kinds; the bucket size does not change them
TIMED = [s["label"] for s in _ALL if s["link"] == "emulated"]
IDEAL = [s["label"] for s in _ALL if s["link"] == "ideal"]
OPT_IN = {s["label"] for s in _ALL if s.get("opt_in")}
SCHEDULE_FROM = {s["label"]: s["schedule_from"] for s in _ALL if s.get("schedule_from")}  # runs on that one's schedule
# the run an opt-in segment varies: named where its label does not say it (``base+variant``)
VARIES = {s["label"]: s.get("varies") or s["label"].rsplit("+", 1)[0] for s in _ALL}


# Every worker at full speed: the link's rate (and flsgd_timed's window) is a property of the
# link and the model, the same whatever --set slows the workers of the timed runs
FULL_SPEED = ["cluster.worker_speed=null", "cluster.slow_spell.p=0"]


def steady(rows: list[dict], field: str) -> float:
    """The median ``field`` (backward, time) of a calibration run's rows over their middle half:
    the first passes warm up, and in the last ones the other ranks, which nothing keeps in step
    with rank 0 there, have finished and left it a core of its own."""
    n = len(rows)
    return statistics.median(r[field] for r in rows[n // 4: max(n // 4 + 1, 3 * n // 4)])


def calibration_overrides(spec: dict) -> list[str]:
    """The job's calibration run: nosync on the ideal link, every worker at full speed, whose
    backward fixes the emulated rate."""
    return spec["base"] + ["algo=nosync", "bandwidth=ideal", *FULL_SPEED,
                           f"train.iterations={spec['calibration_iterations']}"]


def _window_s(spec: dict, seg: dict, calibration: dict) -> list[str]:
    if not seg.get("window"):
        return []
    if calibration.get("iteration_s") is None:
        raise ValueError(f"segment {seg['label']}: its window needs the calibration's iteration_s")
    H = int(next(o for o in reversed(spec["base"]) if o.startswith("algo.H=")).split("=", 1)[1])
    return [f"algo.window_s={seg['window'] * H * calibration['iteration_s']:.6g}"]


def segment_overrides(spec: dict, seg: dict, calibration: dict, memory: bool = False, schedule: bool = True) -> list[str]:
    """A segment's whole command line in the job of ``spec`` (dreamddp/bench/jobs.py's job_spec): the base,
    its own overrides, its link (the emulated one at the calibrated ``calibration["gbps"]``), a timed
    window from the calibration's full-speed ``iteration_s``, the schedule it runs on
    (``schedule_from``: that segment's, written by its run, so ``schedule=False`` before the job),
    and its iterations (a memory segment's fewer)."""
    gbps = calibration["gbps"]
    link = ["bandwidth=ideal"] if seg["link"] == "ideal" else ["bandwidth=1gbit", f"bandwidth.gbps={gbps}"]
    if seg["link"] != "ideal" and spec.get("latency_ms"):
        link.append(f"bandwidth.latency_ms={spec['latency_ms']}")
    extra = [f"algo.schedule={os.path.join(spec['out'], seg['schedule_from'], 'schedule.json')}"] \
        if schedule and seg.get("schedule_from") else []
    iterations = spec["memory_iterations"] if memory else spec["iterations"]
    return spec["base"] + seg["overrides"] + _window_s(spec, seg, calibration) + link + extra \
        + [f"train.iterations={iterations}"]
