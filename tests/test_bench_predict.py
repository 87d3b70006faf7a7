"""The benchmark reports' compute reference (dreamddp/reports/predict.py): the job's two compute-only
runs pooled, their timed iterations and every rank's quantiles, exact on hand-made records; and
flsgd_timed's window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dreamddp.reports.records import Record
from dreamddp.schedule.profile import Profile, save_profile

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def bench_modules():
    from dreamddp.bench import jobs
    from dreamddp.reports import predict

    return predict, jobs


def record(forward: float, backward: float, rest: float, quantiles: list[list[float]]) -> dict:
    """Ten iterations (the first one untimed: summary.warmup_cut) at the given compute."""
    rows = [{"time": 9.0, "wait": 0.0, "forward": 9.0, "backward": 9.0}]  # warm-up: must not count
    rows += [{"time": forward + backward + rest, "wait": 0.0, "forward": forward, "backward": backward}] * 9
    return {"iterations": rows, "extra": {"compute_by_rank": [{"quantiles": q} for q in quantiles]}}


def job(tmp_path) -> dict:
    profile = Profile(units=["b", "a"], bp={"b": 1.0, "a": 3.0}, comm={"b": 0.0, "a": 0.0},
                      fwd={"a": 1.0, "b": 1.0}, nbytes={"a": 4, "b": 4}, step_time=0.5)
    save_profile(profile, tmp_path / "profile")
    return {"dreamddp": Record.of({}, str(tmp_path)),
            "nosync@ideal": Record.of(record(0.10, 0.20, 0.01, [[0.30, 0.32], [0.34, 0.36]])),
            "plain@ideal": Record.of(record(0.14, 0.24, 0.03, [[0.40], [0.42]]))}


def test_the_reference_pools_both_compute_only_runs(tmp_path, bench_modules):
    bp, _ = bench_modules
    segs = job(tmp_path)
    assert len(bp.reference_rows(segs)) == 18
    assert bp.reference_mean(segs, "backward") == pytest.approx(0.22)
    assert bp.reference_mean(segs, "backward", (bp.NOSYNC,)) == pytest.approx(0.20)

    steady = bp.steady_profile(segs)  # the per-unit shares kept, the totals the pooled means
    assert sum(steady.fwd.values()) == pytest.approx(0.12) and steady.fwd["a"] == pytest.approx(0.06)
    assert sum(steady.bp.values()) == pytest.approx(0.22) and steady.bp["a"] == pytest.approx(0.165)
    assert steady.step_time == pytest.approx(0.02)
    alone = bp.steady_profile(segs, (bp.NOSYNC,))
    assert sum(alone.bp.values()) == pytest.approx(0.20) and alone.step_time == pytest.approx(0.01)

    # every rank's samples from both runs, over the pooled profile's compute (0.36 s)
    skew = bp.reference_skew(segs, steady)
    np.testing.assert_allclose(skew.factors[0], np.array([0.30, 0.32, 0.40]) / 0.36)
    np.testing.assert_allclose(skew.factors[1], np.array([0.34, 0.36, 0.42]) / 0.36)
    only = bp.reference_skew(segs, alone, labels=(bp.NOSYNC,))
    np.testing.assert_allclose(only.factors[1], np.array([0.34, 0.36]) / 0.31)

    del segs["plain@ideal"]  # a job without plain (--only): nosync alone
    assert sum(bp.steady_profile(segs).bp.values()) == pytest.approx(0.20)


def test_compute_excess_counts_forward_only_where_no_wait_falls_in_it(tmp_path, bench_modules):
    # the compute-only runs pooled: forward 0.12 s, backward 0.22 s
    bp, _ = bench_modules
    segs = job(tmp_path)
    run = {**record(0.13, 0.25, 0.0, []), "config": {"algo": {"name": "dreamddp"}}}
    assert bp.compute_excess(Record.of(run), segs) == pytest.approx(0.01 + 0.03)
    overlapped = Record.of({**run, "config": {"algo": {"name": "dreamddp", "overlap_forward": True}}})
    assert bp.waits_in_forward(overlapped) and bp.compute_excess(overlapped, segs) == pytest.approx(0.03)
    dear = Record.of({**run, "config": {"algo": {"name": "dear"}}})  # its all-gathers complete before forward
    assert bp.waits_in_forward(dear) and bp.compute_excess(dear, segs) == pytest.approx(0.03)
    faster = Record.of({**record(0.12, 0.20, 0.0, []), "config": {"algo": {"name": "flsgd"}}})
    assert not bp.waits_in_forward(faster) and bp.compute_excess(faster, segs) == pytest.approx(-0.02)


def test_the_timed_window_is_its_share_of_h_calibrated_iterations_and_calibration_runs_at_full_speed(tmp_path):
    from dreamddp.bench import study_run
    from dreamddp.bench.segments import calibration_overrides, segment_overrides
    from dreamddp.study import catalogue_runs, load

    path = tmp_path / "s.yaml"
    path.write_text("about: x\nmodels: {gpt2: small}\nruns: [flsgd_timed, nosync@ideal]\n"
                    "regime: {H: 8, set: ['cluster.worker_speed=[1,0.5]']}\n")
    study = study_run.select(load(path), study_run.parse_args([str(path)]))
    spec = study_run.job_list(study, study.parts[0], [0])[0][2]
    timed = next(s for s in spec["segments"] if s["label"] == "flsgd_timed")
    overrides = segment_overrides(spec, timed, {"gbps": 0.1, "iteration_s": 0.25})
    window = catalogue_runs()["flsgd_timed"].window
    assert f"algo.window_s={window * 8 * 0.25:.6g}" in overrides and "cluster.worker_speed=[1,0.5]" in overrides
    nosync = next(s for s in spec["segments"] if s["label"] == "nosync@ideal")
    assert not any(o.startswith("algo.window_s") for o in segment_overrides(spec, nosync, {"gbps": 0.1}))
    with pytest.raises(ValueError, match="iteration_s"):
        segment_overrides(spec, timed, {"gbps": 0.1})
    calibration = calibration_overrides(spec)  # the --set slows the timed runs, never the link's calibration
    assert calibration.index("cluster.worker_speed=null") > calibration.index("cluster.worker_speed=[1,0.5]")


def test_the_ranks_drawn_together_come_from_the_series_iteration_by_iteration(tmp_path, bench_modules):
    bp, _ = bench_modules
    segs = job(tmp_path)
    assert not bp.reference_skew(segs, bp.steady_profile(segs)).joint  # without series: each rank's quantiles
    assert bp.rank_correlation(segs) is None
    series = {"nosync@ideal": [[0.30, 0.32, 0.31], [0.34, 0.36, 0.35]], "plain@ideal": [[0.40, 0.44], [0.41, 0.45]]}
    for label, by_rank in series.items():
        for entry, values in zip(segs[label].raw["extra"]["compute_by_rank"], by_rank):
            entry["series"] = values
    steady = bp.steady_profile(segs)
    skew = bp.reference_skew(segs, steady)
    assert skew.joint  # sample k of every rank is one measured iteration: both runs', in order
    np.testing.assert_allclose(skew.factors[0], np.array([0.30, 0.32, 0.31, 0.40, 0.44]) / 0.36)
    np.testing.assert_allclose(skew.factors[1], np.array([0.34, 0.36, 0.35, 0.41, 0.45]) / 0.36)
    apart = bp.reference_skew(segs, steady, together=False)  # the quantiles, each rank on its own
    assert not apart.joint
    np.testing.assert_allclose(apart.factors[0], np.array([0.30, 0.32, 0.40]) / 0.36)
    # each run centred on its own means: the ranks moved exactly together (nosync) and together (plain)
    assert bp.rank_correlation(segs) == pytest.approx(1.0)
    segs["plain@ideal"].raw["extra"]["compute_by_rank"][1]["series"] = [0.45, 0.41]
    # centred: rank 0 (-0.01, 0.01, 0, -0.02, 0.02), rank 1 (-0.01, 0.01, 0, 0.02, -0.02): -0.6
    a, b = np.array([-0.01, 0.01, 0.0, -0.02, 0.02]), np.array([-0.01, 0.01, 0.0, 0.02, -0.02])
    assert bp.rank_correlation(segs) == pytest.approx(float(np.corrcoef(a, b)[0, 1])) == pytest.approx(-0.6)
    del segs["plain@ideal"]  # a job without plain (--only): nosync's series alone
    assert bp.rank_correlation(segs) == pytest.approx(1.0)


def test_the_engines_host_work_per_op_comes_from_the_untimed_iterations(bench_modules):
    """engine_host: per op, over the rows before summary.warmup_cut (the first 2 of 20), never
    the timed ones; none where the record does not time it, nothing launched, or on CUDA."""
    bp, _ = bench_modules
    early = [{"ops": 4, "launch_host": 4e-4, "completed": 2, "complete_host": 1e-4},
             {"ops": 6, "launch_host": 8e-4, "completed": 8, "complete_host": 9e-4}]
    late = [{"ops": 1, "launch_host": 1.0, "completed": 1, "complete_host": 1.0}] * 18
    rec = {"config": {"cluster": {"device": "cpu"}}, "iterations": early + late}
    host = lambda raw: bp.engine_host(Record.of(raw))  # noqa: E731
    assert host(rec) == pytest.approx((1.2e-4, 1e-4))
    assert host({**rec, "config": {"cluster": {"device": "cuda"}}}) is None
    auto = {**rec, "config": {"cluster": {"device": "auto"}}}  # resolved to CUDA where the host has a GPU
    assert host({**auto, "hardware": {"gpus": []}}) == host(rec)
    assert host({**auto, "hardware": {"gpus": ["NVIDIA H100"]}}) is None
    assert host({**rec, "iterations": [{"time": 1.0}] * 20}) is None  # made before the engine timed it
    idle = [{**r, "ops": 0} for r in early]
    assert host({**rec, "iterations": idle + late}) is None


def test_the_launches_host_work_in_backward_is_the_engines_not_slower_compute(tmp_path, bench_modules):
    """backward_over_reference and compute_excess take out the host work the predictions charge
    for the launches the run's plan makes inside the phase (engine_host per op, from the untimed
    first iteration): PLSGD-ENP launches one all-reduce from a gradient-ready hook per iteration,
    S-SGD after backward; without a profile to plan on nothing is taken out."""
    bp, _ = bench_modules
    segs = job(tmp_path)  # the compute-only runs pooled: forward 0.12 s, backward 0.22 s
    profile = bp.steady_profile(segs)
    host = {"ops": 1, "launch_host": 0.01, "completed": 1, "complete_host": 0.0}
    rows = [{"time": 9.0, "wait": 0.0, "forward": 9.0, "backward": 9.0, **host}]
    rows += [{"time": 0.4, "wait": 0.0, "forward": 0.12, "backward": 0.23, **host}] * 9

    def run(name: str) -> Record:
        return Record.of({"iterations": rows, "config": {"algo": {"name": name, "H": 2}, "cluster": {"device": "cpu"},
                                               "bandwidth": {"latency_ms": 0.0, "calibration": 1.0}},
                "extra": {"world_size": 2, "algorithm": {}, "link": {"gbps": 10.0, "alpha_ms": 0.0, "carrier": "eager"}}})

    plsgd, ssgd = run("plsgd_enp"), run("ssgd")
    assert bp.host_charged(plsgd, profile, ("backward",)) == pytest.approx(0.01)
    assert bp.host_charged(plsgd, profile, ("forward",)) == 0.0
    assert bp.backward_over_reference(plsgd, segs, profile) == pytest.approx(1.0)
    assert bp.compute_excess(plsgd, segs, profile) == pytest.approx(0.0)
    assert bp.backward_over_reference(ssgd, segs, profile) == pytest.approx(0.23 / 0.22)  # launched after backward
    assert bp.compute_excess(ssgd, segs, profile) == pytest.approx(0.01)
    assert bp.backward_over_reference(plsgd, segs) == pytest.approx(0.23 / 0.22)  # no profile: nothing planned


def test_a_records_turn_is_its_jobs_chunk(tmp_path, bench_modules):
    """The predictions line the ranks up where the job's turns start (spec.json's chunk; 0: one
    H-window); a record from outside a benchmark job runs continuously."""
    import json

    bp, _ = bench_modules
    raw = {"config": {"algo": {"name": "dreamddp", "H": 10}}}
    (tmp_path / "spec.json").write_text(json.dumps({"chunk": 1}))
    assert bp.turn(Record.of(raw, str(tmp_path / "dreamddp"))) == 1
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "spec.json").write_text(json.dumps({"chunk": 0}))
    assert bp.turn(Record.of(raw, str(tmp_path / "other" / "flsgd"))) == 10
    assert bp.turn(Record.of(raw)) is None


def test_phase_overhead_is_each_phase_difference_inside_each_repetition():
    from dreamddp.reports import overhead as report

    reps = {0: {"nosync@ideal": Record.of(record(0.100, 0.210, 0.012, [[0.3]])),
                "plain@ideal": Record.of(record(0.101, 0.200, 0.010, [[0.3]]))},
            1: {"nosync@ideal": Record.of(record(0.100, 0.230, 0.010, [[0.3]])),
                "plain@ideal": Record.of(record(0.100, 0.200, 0.010, [[0.3]]))},
            2: {"plain@ideal": Record.of(record(0.1, 0.2, 0.0, [[0.3]]))}}  # no nosync: not a pair
    got = report.phase_overhead(reps)
    assert list(got) == list(report.PHASES)
    assert got["forward"] == pytest.approx((-0.5, -1.0, 0.0))
    assert got["backward"] == pytest.approx((20.0, 10.0, 30.0))
    assert got["step and the rest"] == pytest.approx((1.0, 0.0, 2.0))
    assert report.phase_overhead({0: {"plain@ideal": reps[0]["plain@ideal"]}}) == {}


def test_the_regime_line_reads_the_hosts_share_and_counts_carriers_over_emulated_runs_alone():
    from dreamddp.reports import regime

    def run(carrier: str, paced: bool, host: dict | None = None) -> Record:
        extra = {"link": {"carrier": carrier, "paced": paced, "hold_core": False}, "host": host or {}}
        return Record.of({"config": {"train": {"batch_size": 8}, "cluster": {"device": "cpu"}}, "extra": extra})

    head = run("eager", True, {"local_workers": 2, "cores": 4, "cpu_quota": 1.5, "pinned": [0, 1]})
    segs = {"dreamddp": head, "flsgd": run("step", True), "ssgd": run("eager", True),
            "ssgd@tc": run("step", False), "flsgd@memory": run("step", True)}  # neither is an emulated timed run
    assert regime.batch(head) == "batch 8 per worker"
    assert regime.emulation(head, segs) == ("Host: 2 workers on 4 cores, compute threads capped at 1.5 cores, pinned; "
                                            "carrier eager (step: flsgd), hold_core False.")
    # an old record with no host share recorded, and no emulated run beside it: its own carrier
    assert regime.emulation(run("step", False), {}) == ("Host: ? workers on ? cores, no CPU quota (not recorded), "
                                                         "not pinned; carrier step, hold_core False.")
