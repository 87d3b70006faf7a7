"""Study files (runners/*.yaml, dreamddp/study.py): every published one loads and lists its
jobs without starting any, a bad one is refused in one line naming the file and the field, and
the jobs a study makes are the ones its regime says (models, runs in order, iterations, overrides)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dreamddp.bench import jobs, study_run
from dreamddp.study import RUNNERS, StudyError, load

STUDIES = sorted(RUNNERS.glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def selected(path, *argv: str):
    return study_run.select(load(path), study_run.parse_args([str(path), *argv]))


def specs(study) -> dict[str, dict]:
    return {spec["out"]: spec for part in study.parts for _, _, spec in study_run.job_list(study, part)}


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_every_study_file_loads_and_its_dry_run_lists_every_job(path, capsys, monkeypatch, tmp_path):
    """No job starts (jobs.job would fail the test), every part's folder and every job's folder
    is listed, and a folder never run is said to run."""
    monkeypatch.setattr(jobs, "job", lambda *a: pytest.fail("a dry run started a job"))
    out = tmp_path / "out"
    assert study_run.main([str(path), "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    study = selected(path, "--out", str(out))
    assert study.about and (study.parts or study.reports)
    for part in study.parts:
        assert f"-> {study_run.part_out(study, part)} " in text
        if part.regime.link == "emulated":
            for model, rep, spec in study_run.job_list(study, part):
                assert f"  {model} rep{rep} -> {spec['out']}: runs (not run before)" in text
                assert " ".join(s["label"] for s in spec["segments"]) in text
        else:
            assert "calibration" in text
    assert not out.exists()


def test_the_study_files_keep_the_jobs_the_make_targets_ran():
    """The regimes as the committed records ran them: make bench's batches and whole H-windows,
    the methods' ratios and quality run, the latency and unequal settings, the gpu's one worker."""
    from dreamddp.run.summary import warmup_cut

    head = specs(selected(RUNNERS / "headline.yaml"))
    gpt2 = head["results/bench/headline/runs/gpt2/rep0"]
    resnet = head["results/bench/headline/runs/resnet18/rep1"]
    assert (gpt2["iterations"], resnet["iterations"]) == (22, 33)
    assert "train.batch_size=12" in gpt2["base"] and "train.batch_size=32" in resnet["base"]
    assert all((s["iterations"] - warmup_cut(s["iterations"])) % 10 == 0 for s in head.values())
    assert gpt2["memory"] and not resnet["memory"] and len(head) == 6
    methods = specs(selected(RUNNERS / "methods.yaml"))
    assert methods["results/bench/methods/time/ratio30/runs/gpt2/rep0"]["ratio"] == 30.0
    quality = methods["results/bench/methods/quality/runs/resnet18/rep2"]
    assert quality["iterations"] == 330 and quality["base"][-1] == "train.eval_every=330"
    assert "model.size=small" in quality["base"] and not quality["memory"]
    latency = specs(selected(RUNNERS / "latency.yaml"))
    assert latency["results/bench/latency/40ms/runs/gpt2/rep0"]["latency_ms"] == 40.0
    unequal = specs(selected(RUNNERS / "unequal.yaml"))
    assert unequal["results/bench/unequal/rank1x0.5/runs/gpt2/rep0"]["base"][-1] == "cluster.worker_speed=[1,0.5]"
    assert unequal["results/bench/unequal/spells/runs/gpt2/rep0"]["iterations"] == 66
    single = specs(selected(RUNNERS / "gpu.yaml"))["results/gpu/gpt2_single/runs/gpt2/rep0"]
    assert "cluster.nproc=1" in single["base"] and single["iterations"] == 102
    assert [s["label"] for s in single["segments"]] == ["nosync@ideal", "plain@ideal"]


def test_the_command_line_narrows_a_study_and_a_set_comes_last(tmp_path):
    study = selected(RUNNERS / "quickstart.yaml", "--reps", "2", "--only", "ssgd", "flsgd", "--set", "train.lr=3e-4")
    (part,) = study.parts
    assert part.reps == 2 and [r.label for r in part.runs] == ["ssgd", "flsgd"]
    spec = study_run.job_list(study, part)[1][2]
    assert spec["base"][-1] == "train.lr=3e-4" and spec["out"] == "outputs/quickstart/runs/gpt2/rep1"
    assert [s["label"] for s in spec["segments"]] == ["flsgd", "ssgd"]  # rotated by one per repetition
    quick = study_run.job_list(selected(RUNNERS / "headline.yaml", "--quick", "--models", "gpt2"),
                               selected(RUNNERS / "headline.yaml", "--quick", "--models", "gpt2").parts[0])[0][2]
    assert "model.size=tiny" in quick["base"] and quick["iterations"] == 12


def test_an_opt_in_run_and_a_run_on_another_schedule_stay_where_the_study_puts_them(tmp_path):
    path = write(tmp_path, """
        about: overlap on DreamDDP's own schedule
        models: {gpt2: small}
        runs: [dreamddp, dreamddp+overlap+same-schedule, dreamddp+delay+eager, nosync@ideal]
        """)
    study = selected(path)
    for rep in range(4):  # every rotation keeps it behind the run whose schedule.json it reads
        labels = [s["label"] for s in study_run.job_list(study, study.parts[0], [rep])[0][2]["segments"]]
        assert labels[labels.index("dreamddp") + 1] == "dreamddp+overlap+same-schedule"
    seg = study_run.job_list(study, study.parts[0], [0])[0][2]["segments"][2]
    assert seg == {"label": "dreamddp+delay+eager", "overrides": ["algo=dreamddp", "algo.merge_delay=1",
                                                                  "bandwidth.carrier=eager"],
                   "link": "emulated", "opt_in": True}
    with pytest.raises(StudyError, match="--only dreamddp\\+overlap\\+same-schedule: runs on dreamddp's schedule"):
        selected(path, "--only", "dreamddp+overlap+same-schedule")


def test_a_run_defined_inline_takes_its_models_bucket_and_the_window_its_share_of_h(tmp_path):
    from dreamddp.bench.segments import segment_overrides

    path = write(tmp_path, """
        about: a window twice H
        models: {gpt2: compute}
        runs:
          - {label: flsgd_timed2, overrides: [algo=flsgd_timed], window: 2.0, varies: flsgd}
          - {label: buckets, overrides: [algo=ascwfbp, "algo.bucket_mb={bucket_mb}"], link: ideal}
        regime: {H: 8, set: ["cluster.worker_speed=[1,0.5]"]}
        """)
    study = selected(path)
    spec = study_run.job_list(study, study.parts[0], [0])[0][2]
    timed, buckets = spec["segments"]
    assert f"algo.window_s={2.0 * 8 * 0.25:.6g}" in segment_overrides(spec, timed, {"gbps": 0.1, "iteration_s": 0.25})
    assert "algo.bucket_mb=0.78" in buckets["overrides"]


@pytest.mark.parametrize("text,message", [
    ("parts: [{name: a}, {name: b, regime: {ratio: 0}}]", "s.yaml: parts[1].regime.ratio: must be > 0 (got 0.0)"),
    ("reps: 0", "s.yaml: reps: must be >= 1 (got 0)"),
    ("regime: {ratoi: 7}", "s.yaml: regime.ratoi: unknown field"),
    ("colour: red", "s.yaml: colour: unknown field"),
    ("runs: [flsdg]", "s.yaml: runs[0]: no run 'flsdg' in runners/catalogue/runs.yaml"),
    ("models: {gpt2: huge}", "s.yaml: models.gpt2.preset: no gpt2 preset 'huge'"),
    ("regime: {link: tc, latency_ms: 10}", "s.yaml: regime.latency_ms: the tc link has no latency here"),
    ("regime: {twins: false}", "s.yaml: regime.twins: only a part on the tc link has emulated twins"),
    ("regime: {link: tc, uplinks: [1, 0.5, 0.5]}", "s.yaml: regime.uplinks: one per worker (2), on the tc link only"),
    ("regime: {link: tc, uplinks: [1, 0]}", "s.yaml: regime.uplinks: must be a list of numbers > 0"),
    ("report: [{kind: pie}]", "s.yaml: report[0].kind: must be one of bench, tc"),
])
def test_a_bad_study_file_is_refused_in_one_line_naming_the_field(tmp_path, capsys, text, message):
    base = {"about": "about: x", "models": "models: {gpt2: small}", "runs": "runs: [flsgd, nosync@ideal]"}
    key = text.split(":")[0]
    lines = [v for k, v in base.items() if k != key] + [text]
    path = write(tmp_path, "\n".join(lines) + "\n")
    assert study_run.main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}".replace("s.yaml", "")) and message in err, err


def test_an_option_naming_what_the_study_lacks_is_refused(capsys):
    assert study_run.main([str(RUNNERS / "quickstart.yaml"), "--only", "flsgd", "dreamdpd", "--dry-run"]) == 2
    assert "--only dreamdpd: not in" in capsys.readouterr().err


def test_repetitions_go_round_the_parts_where_the_study_says(monkeypatch):
    """runners/accuracy.yaml: repetition k of every ratio before any ratio's k+1."""
    calls = []
    monkeypatch.setattr(study_run, "run_part", lambda study, part, args, reps=None: calls.append((part.name, reps)))
    monkeypatch.setattr(study_run.study_reports, "write_all", lambda *a, **k: [])
    study = selected(RUNNERS / "accuracy.yaml", "--reps", "2")
    study_run.run(study, study_run.parse_args([study.path, "--reps", "2"]))
    assert calls == [("ratio2", [0]), ("ratio4", [0]), ("ratio7", [0]), ("ratio2", [1]), ("ratio4", [1]), ("ratio7", [1])]


def test_the_methods_claims_are_keyed_by_the_runs_of_the_study():
    study = load(RUNNERS / "methods.yaml")
    labels = {r.label for p in study.parts for r in p.runs}
    assert isinstance(study.claims, dict) and set(study.claims) <= labels and "dreamddp" in study.claims


def test_the_gpu_steps_run_the_study_files_parts_at_their_repetitions(monkeypatch, tmp_path):
    """dreamddp-bench gpu (and run runners/gpu.yaml): each step's parts are `run --parts` calls of
    the study file, resumed, at the step's repetitions; --smoke makes them tiny and on the CPU."""
    from dreamddp.bench import gpu

    calls = []

    class Steps:
        def __init__(self, out, budget_s):
            pass

        def __call__(self, name, cap_s, cmd):
            calls.append((name, cmd))

    monkeypatch.setattr(gpu, "Steps", Steps)
    monkeypatch.setattr(gpu, "CARRY", tmp_path / "no-pack.tar.xz")
    study = load(gpu.STUDY)
    assert gpu.measure(study, str(tmp_path), 60, ["ddp", "single"], smoke=True) == 0
    names = [name for name, _ in calls]
    assert names == ["bench_gpt2_ddp_r3", "bench_resnet18_single_r3", "bench_gpt2_single_r3", "reports"]
    cmd = calls[0][1]
    assert cmd[cmd.index("run") + 1:cmd.index("run") + 4] == [study.path, "--parts", "gpt2_ddp"]
    assert "--resume" in cmd and cmd[cmd.index("--out") + 1] == str(tmp_path / "cpu")
    assert cmd[-3:] == ["--quick", "--set", "cluster.device=cpu"]


@pytest.mark.parametrize("name", ["latency", "unequal"])
def test_the_study_file_makes_the_jobs_its_committed_records_ran(name):
    """The records under results/ made by these studies' last runs: each job's spec.json (the
    code's digest aside) is what the study file makes today, so --resume under the same code
    would keep them."""
    import json

    from dreamddp.study import ROOT

    for out, spec in specs(selected(RUNNERS / f"{name}.yaml")).items():
        committed = json.loads((ROOT / out / "spec.json").read_text())
        committed.pop("source")
        spec.pop("source")
        assert committed == spec, out


def test_a_tc_part_without_twins_runs_only_the_shaped_link_at_its_uplinks(tmp_path):
    """``twins: false``: no emulated twin of any run; ``uplinks``: each worker's uplink, a multiple
    of the calibrated rate, as bandwidth.worker_gbps of every run on the link."""
    from dreamddp.bench import separate

    study = load(write(tmp_path, """\
        about: t
        out: o
        models: {gpt2: small}
        runs: [ssgd, nosync@ideal]
        regime: {link: tc, twins: false, uplinks: [1, 0.5]}
        """))
    part = study.parts[0]
    runs = list(separate._runs(part, part.models[0], 0, {"gbps": 0.1, "iteration_s": 0.1}))
    assert [(seg["label"], link) for seg, link, _ in runs] == [("ssgd", "tc"), ("nosync@ideal", "tc")]
    ssgd, nosync = runs[0][2], runs[1][2]
    assert "bandwidth.worker_gbps=[0.1,0.05]" in ssgd and "bandwidth=tc_1gbit" in ssgd
    assert not any(o.startswith("bandwidth.worker_gbps") for o in nosync)
