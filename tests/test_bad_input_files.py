"""The bad-input catalogue's files (test_bad_input.py has the rest): schedule and profile files and
resume directories, each refused before any worker starts, in one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bad_input_util import SYNTH, checkpoint, one_line
from dreamddp.config import ConfigError, validate


# --- schedule files (beyond test_cli.py's malformed/unknown/missing/range/H) ----------
def _units() -> list[str]:
    import torch

    from dreamddp.models import build_model, model_units

    with torch.device("meta"):
        return [u.name for u in model_units(build_model("gpt2", "tiny"))]


SCHEDULES = {  # name -> (file body from the unit names, or None for a directory; words of the line)
    "directory": (None, "file not found"),
    "empty": (lambda u: "", "not a schedule file"),
    "list": (lambda u: json.dumps([{"H": 2}]), "not a schedule file"),
    "not-an-iteration": (lambda u: json.dumps({"H": 2, "schedule": {**{n: 0 for n in u}, u[0]: "a"}}),
                         "has no valid iteration list ('a')"),
    "negative": (lambda u: json.dumps({"H": 2, "schedule": {**{n: 0 for n in u}, u[0]: -1}}), "outside [0, 2)"),
    "H-zero": (lambda u: json.dumps({"H": 0, "schedule": {n: 0 for n in u}}), "H must be an integer >= 1"),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedule_files(tmp_path, compose_cfg, name):
    body, words = SCHEDULES[name]
    path = tmp_path / "schedule.json"
    if body is None:
        path.mkdir()
    else:
        path.write_text(body(_units()))
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg(["algo=dreamddp", "algo.H=2", f"algo.schedule={path}"]))
    one_line(info.value, f"algo.schedule={path}: ")
    assert words in str(info.value)


def _delayed(u: list[str], late: list, twice: bool = False) -> str:
    """A window of 3 with every unit in iteration 2 (and the first one in 1 too), late as given."""
    schedule = {**{n: 2 for n in u}, u[0]: [1, 2] if twice else 2}
    return json.dumps({"H": 3, "schedule": schedule, "delayed": late})


DELAYED = {  # late collectives and their parts (algo.merge_delay=1, H=3): file body, words of the line
    "part-out-of-range": (lambda u: _delayed(u, [[], [], [[u[0], u[0], 2, 2]]]), "part k of n, 0 <= k < n <= H"),
    "part-missing": (lambda u: _delayed(u, [[], [], [[u[0], u[0], 0, 2]]]), "expected each of 0..n-1 once"),
    "part-not-a-collective": (lambda u: _delayed(u, [[], [[u[0], u[0], 0, 2]], [[u[0], u[0], 1, 2]]]),
                              "is not one of iteration 1's collectives"),
    "part-resyncs": (lambda u: _delayed(u, [[[u[0], u[0], 1, 2]], [], [[u[0], u[0], 0, 2]]], twice=True),
                     "syncs again within algo.merge_delay=1 iterations of 0"),
    # a plan made without the delay: the run would merge nothing late under a delay run's name
    "no-delayed-list": (lambda u: json.dumps({"H": 3, "schedule": {n: 2 for n in u}}),
                        'lists no "delayed" collectives, so algo.merge_delay=1 would merge nothing late'),
}


@pytest.mark.parametrize("name", list(DELAYED))
def test_delayed_schedule_files(tmp_path, compose_cfg, name):
    body, words = DELAYED[name]
    path = tmp_path / "schedule.json"
    path.write_text(body(_units()))
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg(["algo=dreamddp", "algo.H=3", "algo.merge_delay=1", f"algo.schedule={path}"]))
    one_line(info.value, f"algo.schedule={path}: ")
    assert words in str(info.value)


# --- profile files: dreamddp-schedule reads them (exit 2, one line) ---------------
def _profile(tmp_path: Path, **files: str) -> Path:
    d = tmp_path / "profile"
    d.mkdir()
    for name, text in files.items():
        (d / f"{name}.json").write_text(text)
    return d


PROFILES = {  # name -> (files, extra argv, words of the line)
    "missing-dir": (None, [], "profile directory not found"),
    "no-bp": ({"comm": "{}"}, [], "missing bp.json"),
    "torn-bp": ({"bp": '{"h.0": 0.1', "comm": "{}"}, [], "bp.json"),
    "H-zero": ({"bp": '{"h.0": 0.1}', "comm": '{"h.0": 0.1}'}, ["--H", "0"], "--H must be >= 1"),
    "workers-alone": ({"bp": '{"h.0": 0.1}', "comm": '{"h.0": 0.1}'}, ["--workers", "4"], "--workers and --gbps go together"),
}


@pytest.mark.parametrize("name", list(PROFILES))
def test_profile_files_in_dreamddp_schedule(tmp_path, capsys, name):
    from dreamddp.schedule_cli import main

    files, argv, words = PROFILES[name]
    d = tmp_path / "profile" if files is None else _profile(tmp_path, **files)
    assert main([str(d), *argv, "--out", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dreamddp-schedule: error: ") and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "s.json").exists()


# --- resume directories (beyond test_checkpoint.py's mismatches) -----------------
def test_resume_from_a_directory_without_checkpoints(tmp_path, compose_cfg):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg([*SYNTH, f"train.resume={tmp_path / 'empty'}"]))
    one_line(info.value, f"train.resume={tmp_path / 'empty'}: no complete checkpoint")


def test_resume_from_a_checkpoint_of_another_dataset(tmp_path, compose_cfg):
    ckpt = checkpoint(tmp_path, **{"data.name": "shakespeare"})
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg([*SYNTH, f"train.resume={ckpt}"]))
    one_line(info.value, f"train.resume={ckpt}: saved with data.name=shakespeare, this run has data.name=synthetic")


def test_resume_with_other_model_dimensions(tmp_path, compose_cfg):
    ckpt = checkpoint(tmp_path)  # saved before model.* dimensions existed: the presets'
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg([*SYNTH, "model.n_layer=3", f"train.resume={ckpt}"]))
    one_line(info.value, f"train.resume={ckpt}: saved with model.n_layer=None, this run has model.n_layer=3")


@pytest.mark.parametrize("saved,override,start", [
    ({"train.optimizer": "sgd"}, [], "saved with train.optimizer=sgd, this run has train.optimizer=adam"),
    ({"algo.name": "flsgd", "algo.H": 4}, ["algo=flsgd", "algo.H=2"], "saved with algo.H=4, this run has algo.H=2"),
])
def test_resume_under_another_window_or_optimizer(tmp_path, compose_cfg, saved, override, start):
    ckpt = checkpoint(tmp_path, **saved)  # recorded since 2026-11-29; older checkpoints: not compared
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg([*SYNTH, *override, f"train.resume={ckpt}"]))
    one_line(info.value, f"train.resume={ckpt}: {start}")


def test_resume_from_a_torn_meta_file(tmp_path, compose_cfg):
    ckpt = checkpoint(tmp_path)
    (ckpt / "meta.json").write_text('{"step": 3, "ru')
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg([*SYNTH, f"train.resume={ckpt}"]))
    one_line(info.value, f"train.resume={ckpt}: {ckpt / 'meta.json'} is unreadable")


def test_resume_from_a_checkpoint_missing_a_worker_file(tmp_path, compose_cfg):
    ckpt = checkpoint(tmp_path)
    (ckpt / "rank00001.pt").unlink()
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg([*SYNTH, f"train.resume={ckpt}"]))
    one_line(info.value, f"train.resume={ckpt}: step-0000003 lacks worker file(s) rank00001.pt")


