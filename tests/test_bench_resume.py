"""``--resume`` keeps a job only where its folder was made by the same spec and the same code, on
the emulated link (one job per repetition) and on the tc link (each run and each model's
calibration its own folder); any other folder is run again, saying which and why.  Fake job
runners stand in for the workers: no process starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamddp.bench import jobs, separate, study_run
from dreamddp.study import load

STUDY = """
about: two runs on a small GPT-2
models: {gpt2: small}
runs: [flsgd, nosync@ideal]
reps: 1
regime: {link: LINK, memory: false}
"""


def study_of(tmp_path: Path, link: str, *argv: str):
    path = tmp_path / f"{link}.yaml"
    path.write_text(STUDY.replace("LINK", link))
    args = study_run.parse_args([str(path), "--out", str(tmp_path / "out"), *argv])
    return study_run.select(load(path), args), args


def complete(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"status": "completed"}))


@pytest.fixture()
def fake_emulated_job(monkeypatch):
    ran = []

    def job(spec, nproc, rep, port=29400):  # what jobs.job leaves: its spec and every run's record
        out = Path(spec["out"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "spec.json").write_text(json.dumps(spec))
        for seg in spec["segments"]:
            complete(out / seg["label"])
        ran.append(spec["out"])
        return 0.0

    monkeypatch.setattr(jobs, "job", job)
    return ran


def test_an_emulated_job_made_by_other_code_runs_again(tmp_path, monkeypatch, capsys, fake_emulated_job):
    study, args = study_of(tmp_path, "emulated", "--resume")
    (part,) = study.parts
    study_run.run_part(study, part, args)
    assert len(fake_emulated_job) == 1
    study_run.run_part(study, part, args)  # the same spec and code: kept
    assert len(fake_emulated_job) == 1 and "completed before, kept" in capsys.readouterr().out
    monkeypatch.setattr(jobs, "source_digest", lambda: "other-code")
    study_run.run_part(study, part, args)
    assert len(fake_emulated_job) == 2
    assert "gpt2 repetition 0: runs again (made by other code" in capsys.readouterr().out


def test_an_emulated_job_of_another_spec_or_cut_short_runs_again(tmp_path, fake_emulated_job):
    study, args = study_of(tmp_path, "emulated", "--resume")
    (part,) = study.parts
    study_run.run_part(study, part, args)
    spec = study_run.job_list(study, part)[0][2]
    assert jobs.job_state(spec) is None
    (Path(spec["out"]) / "flsgd" / "run.json").write_text(json.dumps({"status": "running"}))
    assert jobs.job_state(spec) == "flsgd did not complete"
    other, _ = study_of(tmp_path, "emulated", "--set", "train.lr=0.5")
    assert "spec differs in base" in jobs.job_state(study_run.job_list(other, other.parts[0])[0][2])


@pytest.fixture()
def fake_tc(monkeypatch):
    """separate's calibration and runs faked: each run leaves its spec and a completed record."""
    ran = []

    def run_job(run_dir: Path, overrides):
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "spec.json").write_text(json.dumps(separate.run_spec(overrides)))
        complete(run_dir)
        ran.append(str(run_dir))
        return {}

    def calibrate(spec, folder, ratio):
        ran.append(str(folder))
        return {"gbps": 0.05, "iteration_s": 0.1, "ring_gbps": 0.04, "ssgd_ratio_at_ring_gbps": 8.0, "ratio": ratio}

    monkeypatch.setattr(separate, "run_job", run_job)
    monkeypatch.setattr(separate, "calibrate", calibrate)
    return ran


def test_a_tc_run_or_calibration_made_by_other_code_runs_again(tmp_path, monkeypatch, capsys, fake_tc):
    study, args = study_of(tmp_path, "tc", "--resume")
    (part,) = study.parts
    study_run.run_part(study, part, args)
    # the calibration, flsgd on both links, nosync once (copied to the emulated tree)
    assert [Path(p).name for p in fake_tc] == ["gpt2", "flsgd", "flsgd", "nosync@ideal"]
    assert (tmp_path / "out" / "emulated" / "runs" / "gpt2" / "rep0" / "nosync@ideal" / "run.json").is_file()
    fake_tc.clear()
    study_run.run_part(study, part, args)
    assert fake_tc == []  # every folder made by the same spec and code: kept
    assert all(line.endswith("--resume keeps it") for line in separate.dry_run(study, part))

    # a run folder of an older kind (no spec.json) is not trusted
    (tmp_path / "out" / "tc" / "runs" / "gpt2" / "rep0" / "flsgd" / "spec.json").unlink()
    study_run.run_part(study, part, args)
    assert [Path(p).parent.parent.parent.parent.name + "/" + Path(p).name for p in fake_tc] == ["tc/flsgd"]
    assert "flsgd (tc): runs again (no spec.json" in capsys.readouterr().out

    fake_tc.clear()
    monkeypatch.setattr(jobs, "source_digest", lambda: "other-code")
    study_run.run_part(study, part, args)
    assert [Path(p).name for p in fake_tc] == ["gpt2", "flsgd", "flsgd", "nosync@ideal"]
    assert "gpt2 calibration: runs again (made by other code" in capsys.readouterr().out


def test_without_resume_every_tc_folder_runs_again(tmp_path, fake_tc):
    study, args = study_of(tmp_path, "tc")
    (part,) = study.parts
    study_run.run_part(study, part, args)
    study_run.run_part(study, part, args)
    assert len(fake_tc) == 8


@pytest.mark.parametrize("link", ["emulated", "tc"])
def test_a_resumed_part_adds_its_seconds_to_those_in_bench_json(tmp_path, link, fake_emulated_job, fake_tc):
    study, args = study_of(tmp_path, link, "--resume")
    (part,) = study.parts
    study_run.run_part(study, part, args)
    made = tmp_path / "out" / ("tc/runs" if link == "tc" else "runs") / "bench.json"
    doc = json.loads(made.read_text())
    made.write_text(json.dumps({**doc, "seconds": 100.0}))  # the jobs of an earlier invocation
    study_run.run_part(study, part, args)  # every job kept: a moment more
    assert 100.0 <= json.loads(made.read_text())["seconds"] < 110.0
    study, args = study_of(tmp_path, link)
    study_run.run_part(study, part, args)  # not resumed: this invocation's seconds alone
    assert json.loads(made.read_text())["seconds"] < 100.0
