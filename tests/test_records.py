"""The reports' typed reader (dreamddp/reports/records.py, versions.py): both record shapes, one code version per
report unless mixing is asked for (and then said), and one definition of bytes in every table."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from dreamddp.reports import records, write_report
from dreamddp.reports.card import card_rows, print_card, records_of
from dreamddp.reports.collect import collect
from dreamddp.reports.tables import speedup_rows

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "bench_small"


def _record(**top) -> dict:
    return {"status": "completed", "config": {"algo": {"name": "dreamddp", "H": 10, "overlap_forward": True},
                                              "model": {"name": "gpt2", "size": "tiny"}, "data": {"name": "d"},
                                              "bandwidth": {"backend": "emulated"}, "seed": 3},
            "extra": {"world_size": 2, "link": {"backend": "emulated"}},
            "summary": {"mean_iteration_time": 0.5, "mean_wait": 0.1, "bytes_per_iteration": 8.0, "iterations": 20},
            "iterations": [{"iteration": i, "time": 0.5, "loss": 1.0, "bytes": 8, "wire_bytes": 4.0} for i in range(20)],
            **top}


def test_an_old_record_carries_its_commit_alone_and_a_new_one_its_provenance():
    old = records.Record.of(_record(git_sha="abc"))
    assert old.provenance == records.Provenance("abc", None, None)
    new = records.Record.of(_record(git_sha="abc", provenance={"git_sha": "def", "dirty": True, "source": "f00d"}))
    assert new.provenance == records.Provenance("def", True, "f00d")
    assert (new.algo, new.variant, new.model, new.world, new.seed, new.H) == \
        ("dreamddp", "dreamddp+overlap", "gpt2/tiny", 2, 3, 10)
    assert new.iterations[0].wire == 4.0 and new.wire_per_iteration() == 4.0 and new.payload_per_iteration() == 8.0


def test_a_record_without_wire_bytes_counts_its_payload():
    raw = _record(git_sha="abc")
    raw["iterations"] = [{k: v for k, v in r.items() if k != "wire_bytes"} for r in raw["iterations"]]
    assert records.Record.of(raw).wire_per_iteration() == 8.0


def _two_commits(tmp_path: Path) -> Path:
    folder = tmp_path / "bench"
    shutil.copytree(FIXTURE / "runs", folder / "runs")
    for path in (folder / "runs" / "gpt2" / "rep1").glob("*/run.json"):
        rec = json.loads(path.read_text())
        path.write_text(json.dumps({**rec, "git_sha": "1111111111deadbeef"}))
    return folder


def test_a_report_over_records_of_two_commits_is_refused_naming_them(tmp_path):
    folder = _two_commits(tmp_path)
    with pytest.raises(SystemExit) as err:
        write_report("bench", str(folder), [str(folder)])
    message = str(err.value)
    assert "\n" not in message and "1111111111" in message and "gpt2/rep1/" in message
    assert not (folder / "README.md").exists()


def test_with_mix_the_report_says_it_mixes_code_and_lists_each_version(tmp_path):
    folder = _two_commits(tmp_path)
    written = write_report("bench", str(folder), [str(folder)], mix=True)
    text = (folder / "README.md").read_text()
    assert str(folder / "README.md") in written and "mixes code versions" in text
    head = text.split("Made by")[0]
    assert "1111111111 ->" in head and "rep1" in head.split("1111111111 ->")[1].splitlines()[0]


@pytest.mark.parametrize("source", [None, "f00d"])
def test_uncommitted_code_is_reported_only_where_one_source_digest_names_it(tmp_path, source):
    folder = tmp_path / "bench"
    shutil.copytree(FIXTURE / "runs", folder / "runs")
    for path in (folder / "runs").glob("gpt2/rep*/*/run.json"):
        rec = json.loads(path.read_text())
        path.write_text(json.dumps({**rec, "provenance": {"git_sha": rec.get("git_sha"), "dirty": True, "source": source}}))
    if source is None:
        with pytest.raises(SystemExit, match="uncommitted code with no source digest"):
            write_report("bench", str(folder), [str(folder)])
    else:
        write_report("bench", str(folder), [str(folder)])
        assert "mixes code versions" not in (folder / "README.md").read_text()


@pytest.mark.parametrize("second_source,refused", [("f00d", False), ("beef", True)])
def test_records_at_two_commits_are_one_version_where_their_source_digest_is_the_same(tmp_path, second_source,
                                                                                        refused):
    """A commit that changes only docs or results leaves the code as it was: the source digest, not
    the commit, says whether two records ran the same code."""
    folder = tmp_path / "bench"
    shutil.copytree(FIXTURE / "runs", folder / "runs")
    for path in (folder / "runs").glob("gpt2/rep*/*/run.json"):
        rec = json.loads(path.read_text())
        later = path.parent.parent.name == "rep1"
        path.write_text(json.dumps({**rec, "provenance": {"git_sha": "2222" if later else "1111", "dirty": False,
                                                          "source": second_source if later else "f00d"}}))
    if refused:
        with pytest.raises(SystemExit, match="different code"):
            write_report("bench", str(folder), [str(folder)])
        with pytest.raises(SystemExit, match="different code"):
            print_card([folder / "runs"])
    else:
        write_report("bench", str(folder), [str(folder)])
        text = (folder / "README.md").read_text()
        assert "mixes code versions" not in text
        assert "mixes code versions" not in print_card([folder / "runs"])  # its compact copies keep the digest
        # the one version is named, with the commits its records were made at and their runs
        (code,) = [line for line in text.splitlines() if line.startswith("Code: ")]
        reps = {int(p.parent.parent.name[3:]): len(list(p.parent.parent.glob("*/run.json")))
                for p in (folder / "runs").glob("gpt2/rep*/*/run.json")}
        assert "source digest f00d" in code and f"1111 ({reps[0]} runs)" in code and f"2222 ({reps[1]} runs)" in code


def test_the_cards_bytes_equal_the_tables_and_the_bench_reports_for_the_same_run(tmp_path):
    runs = collect([FIXTURE / "runs"])
    table = {(r["algorithm"], r["mean_iteration_time_s"]): r["wire_mib_per_iteration"] for r in speedup_rows(runs)}
    shown = [r for r in records_of(runs) if r.label in ("ssgd", "flsgd", "dreamddp")]
    assert len(shown) == 6
    for run in shown:
        ((_, rows),) = card_rows([run])
        assert rows[0]["wire_mib"][0] == pytest.approx(table[(run.variant, run.mean_iteration)])
    folder = tmp_path / "bench"
    shutil.copytree(FIXTURE / "runs", folder / "runs")
    write_report("sweep", str(tmp_path), [str(tmp_path)])
    ((_, card),) = card_rows([r for r in records.bench(folder / "runs").records() if r.label in ("ssgd", "flsgd", "dreamddp")])
    with open(tmp_path / "study.csv") as f:
        study = {r["algorithm"]: float(r["wire_mib"]) for r in csv.DictReader(f)}
    for row in card:
        assert row["wire_mib"][0] == pytest.approx(study[row["algorithm"]])


def test_a_folder_without_bench_json_is_refused_naming_it(tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit, match=f"report: {tmp_path / 'runs'}: no bench.json"):
        write_report("bench", str(tmp_path), [str(tmp_path)])


def test_an_unknown_report_kind_or_a_missing_input_is_refused_before_anything_is_read(tmp_path):
    with pytest.raises(ValueError, match="report kind 'nope'"):
        write_report("nope", str(tmp_path), [str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="input .*missing: no such folder"):
        write_report("bench", str(tmp_path), [str(tmp_path / "missing")])
    with pytest.raises(ValueError, match="inputs takes 2 folders"):
        write_report("methods_card", str(tmp_path), [str(tmp_path)])
