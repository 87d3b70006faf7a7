"""Profile / schedule files and the dreamddp-schedule command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dreamddp.comm.cost import LinkModel
from dreamddp.prediction import simulate
from dreamddp.schedule_cli import main
from dreamddp.schedule.compare import project, reference_root
from dreamddp.schedule.profile import Profile, load_profile, save_profile, scaled
from dreamddp.schedule.schedule_file import read_schedule, save_schedule

GPT2 = reference_root() / "artifact/gpt2/8/10gbit"


def write(d, **files):
    d.mkdir(parents=True, exist_ok=True)
    for name, obj in files.items():
        (d / f"{name}.json").write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return d


def test_load_authors_layout_backward_order_and_nan(tmp_path):
    d = write(tmp_path / "p", bp='{"x": 1.0, "drop": NaN, "y": 2.0}', comm={"x": 3.0, "y": 4.0})
    p = load_profile(d)
    assert p.units == ["y", "drop", "x"]
    assert p.bp == {"x": 1.0, "drop": 0.0, "y": 2.0}
    assert p.comm == {"x": 3.0, "y": 4.0} and p.fwd == {} and p.nbytes == {} and p.step_time == 0.0


def test_peft_names_mapped_and_unknown_dropped(tmp_path):
    d = write(tmp_path / "p", bp={"m.lora_A.default": 1.0, "m.base": 2.0}, comm={"m.lora_A": 0.5, "ghost": 9.0})
    p = load_profile(d)
    assert p.comm == {"m.lora_A.default": 0.5} and p.meta["dropped_comm"] == ["ghost"]


def test_artifact_meta_from_path():
    p = load_profile(GPT2)
    assert (p.meta["world"], p.meta["gbps"], p.meta["model"]) == (8, 10.0, "gpt2")
    assert len(p.units) == 125 and p.units[0] == "lm_head"


def test_save_load_roundtrip(tmp_path):
    p = Profile(["b", "a"], {"a": 1.0, "b": 2.0}, {"a": 0.5, "b": 0.0}, {"a": 0.1, "b": 0.2}, {"a": 8, "b": 0}, 0.3, {"world": 4})
    save_profile(p, tmp_path / "out")
    q = load_profile(tmp_path / "out")
    assert q == p
    assert list(json.loads((tmp_path / "out/bp.json").read_text())) == ["a", "b"]  # forward order on disk


def test_scaled_and_project():
    p = load_profile(GPT2)
    s = scaled(p, bp=2, comm=5)
    u = p.units[3]
    assert (s.bp[u], s.comm[u]) == (2 * p.bp[u], 5 * p.comm[u])
    # 8 workers, 10 Gbit/s -> 32 workers, 1 Gbit/s: x (62/32)/(14/8) x 10
    q = project(p, 32, 1.0)
    assert q.comm[u] == pytest.approx(p.comm[u] * (62 / 32) / (14 / 8) * 10)
    with pytest.raises(ValueError, match="measured world"):
        project(load_profile(reference_root() / "paper-v1/A6000/gpt2"), 32, 1.0)


def test_schedule_roundtrip_and_validation(tmp_path):
    save_schedule(tmp_path / "s.json", 3, {"a": [0], "b": [1, 2]})
    assert json.loads((tmp_path / "s.json").read_text()) == {"H": 3, "schedule": {"a": 0, "b": [1, 2]}}
    assert read_schedule(tmp_path / "s.json") == (3, {"a": [0], "b": [1, 2]})
    (tmp_path / "bad.json").write_text('{"H": 3, "schedule": {"a": 3}}')
    with pytest.raises(ValueError, match=r"iteration 3, outside \[0, 3\)"):
        read_schedule(tmp_path / "bad.json")


def test_cli_writes_authors_format(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main([str(GPT2), "--H", "10", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["H"] == 10 and set(data["schedule"]) == set(load_profile(GPT2).units)
    assert all(isinstance(v, int) or (isinstance(v, list) and len(v) > 1) for v in data["schedule"].values())
    text = capsys.readouterr().out
    for algo in ("ssgd", "ascwfbp", "flsgd", "plsgd_enp", "dreamddp"):
        assert algo in text


def test_cli_authors_model_prints_their_numbers(tmp_path, capsys):
    assert main([str(GPT2), "--authors-model", "--no-bubble", "--out", str(tmp_path / "s.json")]) == 0
    text = capsys.readouterr().out
    assert "0.299607" in text and "0.208430" in text and "0.094232" in text  # sgd, pipe_sgd, localsgd


def test_cli_modelled_link(tmp_path, capsys):
    d = write(tmp_path / "p", bp={"a": 1.0, "b": 1.0}, comm={"a": 0.1, "b": 0.1}, nbytes={"a": 125, "b": 125})
    assert main([str(d), "--H", "2", "--workers", "2", "--gbps", "1e-6", "--out", str(tmp_path / "s.json")]) == 0
    # one 250-byte all-reduce on 2 workers at 1 kbit/s: 2 s after 2 s of backward
    assert "ssgd                     4.000000        2.000000" in capsys.readouterr().out


def test_cli_plans_for_overlap_forward(tmp_path, capsys):
    """make bench's GPT-2 profile on its link: planned for the averages due at the next forward,
    the window syncs differently and the overlapped run is modelled faster than on the plan made
    for the end of backward."""
    profile = Path(__file__).resolve().parents[1] / "results" / "bench" / "headline" / "runs" / "gpt2" / "rep0" / "dreamddp" / "profile"
    link = ["--H", "10", "--workers", "2", "--gbps", "0.07477"]
    assert main([str(profile), *link, "--out", str(tmp_path / "end.json")]) == 0
    capsys.readouterr()
    assert main([str(profile), *link, "--overlap-forward", "--out", str(tmp_path / "fwd.json")]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith("dreamddp+overlap "))
    assert read_schedule(tmp_path / "fwd.json")[1] != read_schedule(tmp_path / "end.json")[1]
    prof, lm = load_profile(profile), LinkModel(0.07477)
    on = {name: simulate("dreamddp", prof, H=10, world=2, link=lm, overlap_forward=True,
                         schedule=read_schedule(tmp_path / name)[1]).mean_iter for name in ("end.json", "fwd.json")}
    assert float(row.split()[1]) == pytest.approx(on["fwd.json"], abs=1e-6)
    assert on["fwd.json"] < 0.99 * on["end.json"]


def test_cli_simulates_dear_with_the_clip_norm(tmp_path, capsys):
    """--grad-clip: DeAR's reduce-scatters complete at the step, where the norm is all-reduced, so
    its modelled iteration grows; the algorithms that clip locally do not change."""
    profile = Path(__file__).resolve().parents[1] / "results" / "bench" / "headline" / "runs" / "gpt2" / "rep0" / "dreamddp" / "profile"
    rows = {}
    for clip in ("0", "1"):
        link = ["--H", "10", "--workers", "2", "--gbps", "0.07477", "--grad-clip", clip]
        assert main([str(profile), *link, "--out", str(tmp_path / f"{clip}.json")]) == 0
        text = capsys.readouterr().out
        rows[clip] = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                      if line.split() and line.split()[0] in ("dear", "ssgd", "dreamddp")}
    assert rows["1"]["dear"] > rows["0"]["dear"]
    assert (rows["1"]["ssgd"], rows["1"]["dreamddp"]) == (rows["0"]["ssgd"], rows["0"]["dreamddp"])


def test_cli_plans_a_delayed_merge(tmp_path, capsys, compose_cfg):
    """--merge-delay: the file holds the plan a run with algo.merge_delay makes at start-up on the
    same profile (its modelled row is that run's), its "delayed" list hides the tied embedding
    the plain plan waits for, and a run takes the file as its schedule."""
    from dreamddp.config import validate

    profile = Path(__file__).resolve().parents[1] / "results" / "bench" / "headline" / "runs" / "gpt2" / "rep0" / "dreamddp" / "profile"
    link = ["--H", "2", "--workers", "2", "--gbps", "0.07477"]
    out = tmp_path / "late.json"
    assert main([str(profile), *link, "--merge-delay", "1", "--out", str(out)]) == 0
    rows = {line.split()[0]: float(line.split()[1]) for line in capsys.readouterr().out.splitlines()[2:]
            if len(line.split()) == 3}
    made = json.loads(out.read_text())
    assert any("transformer.wte" in entry for its in made["delayed"] for entry in its)
    planned = simulate("dreamddp", load_profile(profile), H=2, world=2, link=LinkModel(0.07477), merge_delay=1)
    assert rows["dreamddp+delay1"] == pytest.approx(planned.mean_iter, abs=1e-6)
    assert rows["dreamddp+delay1"] < 0.9 * rows["dreamddp"]
    validate(compose_cfg(["model=gpt2", "model.size=compute", "data=shakespeare", "algo=dreamddp", "algo.H=2",
                          "algo.merge_delay=1", f"algo.schedule={out}"]))


@pytest.mark.parametrize(
    "argv,msg",
    [
        (["/nonexistent/dir"], "not found"),
        ([str(GPT2), "--H", "0"], "--H must be >= 1"),
        ([str(GPT2), "--workers", "4"], "go together"),
        ([str(GPT2), "--workers", "4", "--gbps", "1"], "no nbytes.json"),
        ([str(GPT2), "--authors-model", "--overlap-forward"], "cannot plan for --overlap-forward"),
        ([str(GPT2), "--grad-clip", "-1"], "--grad-clip must be >= 0"),
        ([str(GPT2), "--merge-delay", "10"], "--merge-delay must be in [0, --H=10), got 10"),
        ([str(GPT2), "--merge-delay", "1", "--late-parts", "0"], "--late-parts must be >= 1"),
        ([str(GPT2), "--merge-delay", "1", "--scheduler", "enp"], "--merge-delay plans DreamDDP's window"),
    ],
)
def test_cli_bad_input(argv, msg, tmp_path, capsys):
    assert main(argv + ["--out", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert not (tmp_path / "s.json").exists()


def test_cli_missing_comm_and_bad_json(tmp_path, capsys):
    d = write(tmp_path / "p", bp={"a": 1.0})
    assert main([str(d), "--out", str(tmp_path / "s.json")]) == 2
    assert "missing comm.json" in capsys.readouterr().err
    write(d, comm="{not json")
    assert main([str(d), "--out", str(tmp_path / "s.json")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
