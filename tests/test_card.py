"""The result card (dreamddp/reports/card.py), exact on hand-made records: speedups taken run
against run of the same seed before their median, the benchmark's side runs left out, a sweep's
variants kept apart, the final loss over the last iterations."""

from __future__ import annotations

import json

import pytest

from dreamddp.reports.card import card_rows, card_tables, print_card, records_of, render


def run(algo: str, seed: int, seconds: float, *, backend: str = "emulated", source: str = "", loss=None,
        wait: float = 0.0, nbytes: float = 2**20, **algo_options) -> dict:
    losses = loss or [5.0] * 20
    return {"compact": 1, "status": "completed", "study": "s", "scale": "", "name": source or f"{algo}{seed}",
            "source": source, "start_time": seed,
            "config": {"seed": seed, "algo": {"name": algo, "H": 10, **algo_options}},
            "summary": {"model": "gpt2/tiny", "data": "shakespeare", "workers": 2, "mean_iteration_time": seconds,
                        "mean_wait": wait, "bytes_per_iteration": nbytes},
            "extra": {"link": {"backend": backend, "gbps": 0.1}},
            "iterations": [{"iteration": i, "time": seconds, "loss": v} for i, v in enumerate(losses)], "evals": []}


def rows_by_label(runs: list[dict]) -> dict:
    ((_, rows),) = card_rows(records_of(runs))
    return {r["algorithm"]: r for r in rows}


def test_speedups_pair_runs_of_the_same_seed_before_their_median():
    runs = [run("ssgd", 0, 0.4), run("ssgd", 1, 0.6), run("flsgd", 0, 0.2), run("flsgd", 1, 0.2),
            run("dreamddp", 0, 0.1), run("dreamddp", 1, 0.3)]
    rows = rows_by_label(runs)
    assert list(rows) == ["ssgd", "flsgd", "dreamddp"]  # baselines first, whatever the order found
    assert rows["dreamddp"]["x_ssgd"] == pytest.approx((3.0, 2.0, 4.0))  # 0.4 / 0.1 and 0.6 / 0.3
    assert rows["dreamddp"]["x_flsgd"] == pytest.approx((4 / 3, 2 / 3, 2.0))
    assert rows["ssgd"]["x_ssgd"] == pytest.approx((1.0, 1.0, 1.0))
    assert rows["dreamddp"]["iteration_ms"] == pytest.approx((200.0, 100.0, 300.0))
    assert rows["flsgd"]["runs"] == 2


def test_without_a_baseline_its_column_is_empty_and_unpaired_runs_compare_medians():
    rows = rows_by_label([run("ssgd", 0, 0.4), run("ssgd", 1, 0.6), run("dreamddp", 7, 0.25)])
    assert rows["dreamddp"]["x_flsgd"] is None
    assert rows["dreamddp"]["x_ssgd"] == pytest.approx((2.0, 2.0, 2.0))  # median 0.5 over 0.25


def test_a_benchmarks_side_runs_are_left_out():
    runs = [run("ssgd", 0, 0.4, source="/x/runs/gpt2/rep0/ssgd"),
            run("dreamddp", 0, 0.2, source="/x/runs/gpt2/rep0/dreamddp+delay", merge_delay=1),
            run("nosync", 0, 0.1, backend="ideal", source="/x/runs/gpt2/rep0/nosync@ideal"),
            run("nosync", 0, 0.1, backend="ideal", source="/x/runs/gpt2/rep0/calibration"),
            run("ssgd", 0, 0.4, source="/x/runs/gpt2/rep0/ssgd@memory")]
    assert list(rows_by_label(runs)) == ["ssgd", "dreamddp+delay"]
    # on the ideal link alone (the engine-overhead runs) they are the card
    assert list(rows_by_label([run("nosync", 0, 0.1, backend="ideal"), run("plain", 0, 0.1, backend="ideal")])) == \
        ["nosync", "plain"]


def test_a_sweep_keeps_its_variants_apart():
    runs = [run("dreamddp", 0, 0.2, H=5), run("dreamddp", 0, 0.3, H=10), run("dreamddp", 0, 0.25, overlap_forward=True)]
    assert sorted(rows_by_label(runs)) == ["dreamddp H=10", "dreamddp H=5", "dreamddp+overlap"]


def test_the_final_loss_is_the_mean_of_the_last_ten_iterations():
    losses = [9.0] * 10 + [float(i) for i in range(10)]
    assert rows_by_label([run("ssgd", 0, 0.1, loss=losses)])["ssgd"]["final_loss"] == pytest.approx((4.5, 4.5, 4.5))


def test_the_card_command_reads_record_files_and_says_when_there_are_none(tmp_path, capsys):
    for r in (run("ssgd", 0, 0.4, wait=0.3), run("flsgd", 0, 0.1, wait=0.01)):
        (tmp_path / f"{r['name']}.json").write_text(json.dumps(r))
    text = print_card([tmp_path], tmp_path / "loss.png")
    assert text == render(records_of([run("ssgd", 0, 0.4, wait=0.3), run("flsgd", 0, 0.1, wait=0.01)]))
    assert text.splitlines()[4].split()[:6] == ["flsgd", "1", "100.0", "4.00", "1.00", "10.0"]
    assert (tmp_path / "loss.png").stat().st_size > 0
    with pytest.raises(ValueError, match="no completed run records"):
        print_card([tmp_path / "loss.png"])


def test_the_card_has_at_most_eight_columns_and_none_that_is_na_in_every_row():
    runs = [run("ssgd", 0, 0.4), run("dreamddp", 0, 0.2)]  # no FLSGD: its speedup column is n/a throughout
    (block,) = card_tables(records_of(runs))
    header, rows = block["table"]["header"], block["table"]["rows"]
    assert len(header) <= 8 and "x FLSGD" not in header and "x S-SGD" in header
    for i in range(len(header)):
        assert any(r[i] != "n/a" for r in rows), header[i]


def test_the_cards_bytes_are_wire_bytes_per_worker_not_the_payload():
    # an all-gather at 2 workers: the record's bytes count the whole gathered buffer, the worker sends half
    r = run("dreamddp", 0, 0.2, nbytes=2 * 2**20)
    r["iterations"] = [{**x, "bytes": 2 * 2**20, "wire_bytes": 2**20} for x in r["iterations"]]
    assert rows_by_label([r])["dreamddp"]["wire_mib"] == pytest.approx((1.0, 1.0, 1.0))
    old = run("dreamddp", 0, 0.2, nbytes=2 * 2**20)  # a record made before rows kept wire_bytes: its bytes
    assert rows_by_label([old])["dreamddp"]["wire_mib"] == pytest.approx((2.0, 2.0, 2.0))
