"""Results tools: compact records, the speedup table's arithmetic, figures from real runs, W&B table.

Exact-value checks use hand-built records (known iteration times and
evaluations); the figure/CLI checks use two real tiny runs (ResNet-18 tiny,
2 workers, 4 iterations) made once per session.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dreamddp.reports.collect import collect, safe_name, write_compact
from dreamddp.reports.compact import MAX_POINTS, compact
from dreamddp.reports.tables import speedup_rows, write_tables

REPO = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def record(algo: str, times: list[float], evals: list[tuple[int, float]], H: int = 10, status: str = "completed",
           experiment: str = "convergence_cpu", divergence: list | None = None) -> dict:
    """A full run record as dreamddp/run/record.py writes it, with the summary the trainer computes."""
    iters = [{"iteration": i, "time": t, "forward": t / 4, "backward": t / 4, "wait": t / 2, "bytes": 1024.0,
              "wire_bytes": 1024.0, "loss": 5.0 - i * 0.01, "lr": 0.1, "timeline": {"big": list(range(50))}}
             for i, t in enumerate(times)]
    timed = times[1:]
    return {
        "schema_version": 1, "status": status, "error": None, "start_time": 1.0, "end_time": 2.0,
        "run_dir": f"/x/{algo}",
        "config": {"experiment": {"name": experiment}, "model": {"name": "gpt2", "size": "tiny"},
                   "data": {"name": "shakespeare"}, "algo": {"name": algo, "H": H},
                   "bandwidth": {"backend": "emulated", "gbps": None, "comm_ratio": 7.0},
                   "train": {"batch_size": 8}},
        "iterations": iters, "evals": [{"iteration": i, "loss": v} for i, v in evals],
        "divergence": divergence or [],
        "extra": {"world_size": 2, "samples_per_epoch_per_worker": 1000, "algorithm": {"name": algo, "groups": [[0]]}},
        "summary": {"workers": 2, "iterations": len(times), "mean_iteration_time": sum(timed) / len(timed),
                    "mean_wait": sum(timed) / len(timed) / 2, "bytes_per_iteration": 2.0 * 2**20, "text": "x"},
    }


def test_compact_keeps_what_figures_need_and_thins():
    rec = record("ssgd", [0.5] * 1000, [(499, 4.0), (999, 3.0)])
    c = compact(rec)
    assert c["compact"] == 1 and c["study"] == "convergence" and c["scale"] == "cpu"
    assert len(c["iterations"]) == MAX_POINTS
    assert c["iterations"][0]["iteration"] == 0 and c["iterations"][-1]["iteration"] == 999
    assert c["iterations"][-1]["elapsed"] == pytest.approx(500.0)  # summed over all 1000 rows, not the kept ones
    assert c["evals"][0]["elapsed"] == pytest.approx(250.0)
    assert "timeline" not in c["iterations"][0] and "text" not in c["summary"]
    assert "groups" not in c["extra"]["algorithm"]
    assert compact(c) is c


def test_speedup_table_arithmetic():
    # mean iteration times over iterations 1.. (the summary's): ssgd 2.0, flsgd 0.8, dreamddp 0.5
    runs = [compact(r) for r in (
        record("ssgd", [9.0] + [2.0] * 9, [(4, 4.0), (9, 3.5)]),
        record("flsgd", [9.0] + [0.8] * 9, [(4, 3.9), (9, 3.2)]),
        record("dreamddp", [9.0] + [0.5] * 9, [(4, 3.4), (9, 3.1)]),
    )]
    rows = {r["algorithm"]: r for r in speedup_rows(runs)}
    assert [r["algorithm"] for r in speedup_rows(runs)] == ["ssgd", "flsgd", "dreamddp"]
    assert rows["ssgd"]["target"] == 3.5  # worst final eval loss of the group
    # elapsed at iteration i = 9 + 2 i (ssgd): the target is first met at iteration 9
    assert rows["ssgd"]["time_to_target_s"] == pytest.approx(9.0 + 2.0 * 9)
    assert rows["flsgd"]["time_to_target_s"] == pytest.approx(9.0 + 0.8 * 9)
    assert rows["dreamddp"]["time_to_target_s"] == pytest.approx(9.0 + 0.5 * 4)  # 3.4 <= 3.5 at iteration 4
    assert rows["ssgd"]["speedup_iteration"] == pytest.approx(2.0 / 0.5)
    assert rows["flsgd"]["speedup_iteration"] == pytest.approx(0.8 / 0.5)
    assert rows["flsgd"]["speedup_time_to_target"] == pytest.approx((9.0 + 7.2) / 11.0)
    assert rows["dreamddp"]["speedup_iteration"] == pytest.approx(1.0)
    assert rows["ssgd"]["wire_mib_per_iteration"] == pytest.approx(1024.0 / 2**20)  # the rows' wire_bytes, not the payload
    # an explicit target: nobody but dreamddp reaches 3.15
    rows = {r["algorithm"]: r for r in speedup_rows(runs, targets={"gpt2/tiny": 3.15})}
    assert rows["ssgd"]["time_to_target_s"] is None and rows["dreamddp"]["time_to_target_s"] == pytest.approx(13.5)


def test_speedup_pairs_same_H_and_groups_by_link():
    runs = [compact(record(a, [1.0] + [t] * 4, [(4, 3.0)], H=h)) for a, t, h in
            (("flsgd", 1.0, 5), ("flsgd", 0.8, 20), ("dreamddp", 0.5, 5), ("dreamddp", 0.4, 20))]
    rows = {(r["algorithm"], r["H"]): r for r in speedup_rows(runs)}
    assert rows[("flsgd", 5)]["speedup_iteration"] == pytest.approx(1.0 / 0.5)
    assert rows[("flsgd", 20)]["speedup_iteration"] == pytest.approx(0.8 / 0.4)
    other = record("ssgd", [1.0] * 5, [(4, 3.0)])
    other["config"]["bandwidth"] = {"backend": "ideal", "gbps": None, "comm_ratio": None}
    rows = speedup_rows(runs + [compact(other)])
    ideal = [r for r in rows if r["link"] == "ideal"]
    assert len(ideal) == 1 and ideal[0]["speedup_iteration"] is None  # no dreamddp on that link


def test_collect_filters_status_dedups_and_ignores_other_json(tmp_path):
    for name, rec in (("a", record("ssgd", [1.0] * 3, [(2, 3.0)])),
                      ("b", record("flsgd", [1.0] * 3, [(2, 3.0)], status="failed"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps(rec))
    (tmp_path / "a" / "schedule.json").write_text(json.dumps({"H": 10}))
    wandb_dir = tmp_path / "a" / "wandb" / "offline-run-1-x"
    wandb_dir.mkdir(parents=True)
    runs = collect([tmp_path])
    assert [r["config"]["algo"]["name"] for r in runs] == ["ssgd"]
    assert len(collect([tmp_path], ("completed", "failed"))) == 2
    assert [r["name"] for r in collect([wandb_dir])] == ["a"]  # a W&B offline dir stands for its run's record
    written = write_compact(runs, tmp_path / "out")
    assert written == [tmp_path / "out" / "convergence_cpu" / "a.json"]
    assert len(collect([tmp_path, tmp_path / "out"])) == 1  # the compact copy of the same run counts once
    assert safe_name("algo=ssgd,model=gpt2") == "algo-ssgd_model-gpt2"
    with pytest.raises(FileNotFoundError):
        collect([tmp_path / "missing"])


def _run(args: list[str], cwd: Path = REPO, timeout: int = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory) -> Path:
    """Two real tiny runs (S-SGD and DreamDDP, ResNet-18 tiny, ratio-7 link) in one sweep dir."""
    sweep = tmp_path_factory.mktemp("results_runs")
    p = _run(["-m", "dreamddp.cli", "-m", "experiment=convergence_cpu", "model=resnet18", "model.size=tiny", "algo=ssgd,dreamddp",
              "train.iterations=4", "train.eval_every=2", "train.divergence_every=2", "data.eval_batches=1",
              f"hydra.sweep.dir={sweep}"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return sweep


def test_figures_from_real_runs_and_from_their_compact_copies(real_runs, tmp_path):
    p = _run(["-m", "dreamddp.reports", "figures", "--runs", str(real_runs), "--out", str(tmp_path / "a")])
    assert p.returncode == 0, p.stderr
    for name in ("figures/convergence_epoch_cpu.png", "figures/convergence_time_cpu.png",
                 "figures/scheduler_measured_cpu.png"):
        data = (tmp_path / "a" / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, name
    with open(tmp_path / "a" / "tables" / "convergence_cpu.csv") as fh:
        rows = {r["algorithm"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"ssgd", "dreamddp"}
    full = {r["config"]["algo"]["name"]: r for r in collect([real_runs])}
    assert float(rows["ssgd"]["mean_iteration_time_s"]) == pytest.approx(full["ssgd"]["summary"]["mean_iteration_time"])
    assert float(rows["ssgd"]["speedup_iteration"]) == pytest.approx(
        full["ssgd"]["summary"]["mean_iteration_time"] / full["dreamddp"]["summary"]["mean_iteration_time"], rel=1e-5)
    assert (tmp_path / "a" / "scheduler" / "measured" / "resnet18_tiny_cpu" / "by_units.csv").is_file()
    # compact copies regenerate the same table
    assert _run(["-m", "dreamddp.reports", "collect", "--runs", str(real_runs), "--out", str(tmp_path / "runs")]).returncode == 0
    assert len(list((tmp_path / "runs").rglob("*.json"))) == 2
    p = _run(["-m", "dreamddp.reports", "figures", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "b")])
    assert p.returncode == 0, p.stderr
    a, b = (tmp_path / x / "tables" / "convergence_cpu.csv" for x in "ab")
    assert a.read_text() == b.read_text()


def test_the_card_of_a_sweep_directory_shows_each_run_and_its_figure(real_runs, tmp_path):
    p = _run(["-m", "dreamddp.reports", "card", str(real_runs), "--figure", str(tmp_path / "loss.png")])
    assert p.returncode == 0, p.stderr
    rows = {line.split()[0]: line.split() for line in p.stdout.splitlines()[3:] if line.strip()}
    full = {r["config"]["algo"]["name"]: r for r in collect([real_runs])}
    assert set(rows) == {"ssgd", "dreamddp"}
    assert float(rows["dreamddp"][2]) == pytest.approx(1e3 * full["dreamddp"]["summary"]["mean_iteration_time"], abs=0.06)
    assert float(rows["dreamddp"][3]) == pytest.approx(full["ssgd"]["summary"]["mean_iteration_time"]
                                                       / full["dreamddp"]["summary"]["mean_iteration_time"], abs=0.006)
    assert (tmp_path / "loss.png").read_bytes().startswith(PNG_MAGIC)


def test_cli_errors_are_one_line(tmp_path):
    p = _run(["-m", "dreamddp.reports", "tables", "--runs", str(tmp_path / "nope"), "--out", str(tmp_path)])
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1
    (tmp_path / "empty").mkdir()
    p = _run(["-m", "dreamddp.reports", "tables", "--runs", str(tmp_path / "empty"), "--target", "x=abc"])
    assert p.returncode == 2 and "error:" in p.stderr


def test_wandb_table_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from dreamddp.reports.wandb_table import log_tables

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    runs = [compact(record("ssgd", [1.0] * 3, [(2, 3.0)])), compact(record("dreamddp", [0.5] * 3, [(2, 3.1)]))]
    dirs = [Path(d) for d in log_tables(runs, tmp_path / "wb")]
    assert len(dirs) == 1 and dirs[0].name.startswith("offline-run-") and dirs[0].is_relative_to(tmp_path)
    assert list(dirs[0].glob("*.wandb")), "no offline run file"
    tables = list(dirs[0].rglob("*.table.json"))
    assert tables, "the table was not written"
    data = json.loads(tables[0].read_text())
    assert "speedup_iteration" in data["columns"] and len(data["data"]) == 2
    write_tables(runs, tmp_path / "t")
    lines = (tmp_path / "t" / "tables" / "convergence_cpu.md").read_text().splitlines()
    assert sum(line.startswith("| ssgd |") for line in lines) == 1  # one detail row per run


def _first_table(text: str) -> list[list[str]]:
    """The cells of the first markdown table in ``text`` (its header first, the rule left out)."""
    lines = text[text.index("\n|"):].strip().split("\n\n")[0].splitlines()
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines if not line.startswith("|---")]


def test_a_studys_table_opens_with_a_card_of_at_most_8_columns_and_no_empty_one():
    from dreamddp.reports.tables import markdown

    timed = [compact(record(a, [1.0] + [t] * 4, [(4, 3.0)], H=h)) for a, t, h in
             (("ssgd", 2.0, 10), ("flsgd", 0.5, 5), ("dreamddp", 0.4, 5))]
    text = markdown(speedup_rows(timed), "x")
    card = _first_table(text)
    assert 1 < len(card) and len(card[0]) <= 8 and text.index("| setting |") < text.index("\n## ")
    assert [r[1] for r in card[1:]] == ["ssgd", "flsgd H=5", "dreamddp H=5"]
    assert all(any(row[i] for row in card[1:]) for i in range(len(card[0])))
    # no evaluation in any run: no final value, no target, so neither column is shown
    untargeted = _first_table(markdown(speedup_rows([compact(record("ssgd", [1.0] * 3, []))]), "x"))
    assert not {"final eval loss", "time to target s"} & set(untargeted[0])
