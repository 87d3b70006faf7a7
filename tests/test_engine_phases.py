"""The engine's own cost by phase: runners/engine_phases.py trains an algorithm on the engine
(one process: its averages are the replica itself) and the bare model to the same parameters,
bitwise, with dropout on (GPT-2's: without the same seed per iteration in both replicas their
masks differ and so do the parameters), and writes its sections under one title;
bench_overhead.phase_overhead's per-phase differences, exact on hand-made records."""

from __future__ import annotations

import importlib

import pytest

from test_bench_predict import ROOT, record


@pytest.fixture()
def runners(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "runners"))
    return importlib.import_module("engine_phases"), importlib.import_module("bench_overhead")


def test_the_engine_and_the_bare_model_train_alike_and_the_sections_share_one_title(runners, tmp_path):
    phases, _ = runners
    out = tmp_path / "phases.md"
    assert phases.main(["--model", "resnet18", "--size", "tiny", "--iterations", "10", "--chunk", "5",
                        "--batch", "4", "--out", str(out)]) == 0
    assert phases.main(["--model", "gpt2", "--size", "tiny", "--iterations", "10", "--chunk", "5",
                        "--batch", "2", "--block", "16", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.count(phases.TITLE) == 1 and text.count("Same parameters after training: yes.") == 2
    for phase in phases.PHASES:
        assert text.count(f"| {phase} |") == 2


@pytest.mark.parametrize("options", [["--algo", "dreamddp", "--set", "H=2", "overlap_forward=true"],
                                     ["--algo", "dreamddp", "--set", "H=2", "merge_delay=1"],
                                     ["--algo", "dear"], ["--algo", "ascwfbp"],
                                     # the carriers make bench's emulated link uses on the CPU
                                     ["--algo", "dreamddp", "--set", "H=2", "--carrier", "deferred"],
                                     ["--algo", "dreamddp", "--set", "H=2", "merge_delay=1", "--carrier", "step"]])
def test_an_algorithm_on_one_process_trains_as_the_bare_model(runners, options, capsys):
    phases, _ = runners
    assert phases.main(["--model", "resnet18", "--size", "tiny", "--iterations", "8", "--chunk", "4",
                        "--batch", "4", *options]) == 0
    assert "Same parameters after training: yes." in capsys.readouterr().out


def test_on_cuda_the_largest_difference_is_printed_not_checked(runners):
    """Two CUDA replicas of the bare model need not train bitwise alike (an H200 run:
    results/gpu/README.md, run 5): there the line states the difference and is no failure."""
    phases, _ = runners
    times = phases.measure("resnet18", "tiny", "cpu", 4, 2, 4, 16, phases.algorithm_config("nosync", {}))
    assert times["same_parameters"] and times["largest_difference"] == 0.0
    assert phases.same_line("nosync", True, 0.0, False) == "Same parameters after training: yes."
    assert phases.same_line("nosync", False, 0.5, False) == "Same parameters after training: NO."
    line = phases.same_line("nosync", False, 3.2e-6, True)
    assert "not bitwise the same, largest difference 3.20e-06" in line and "not a check on CUDA" in line
    # with --deterministic the CUDA kernels repeat bitwise, so the verdict is a check again (run 6)
    assert phases.same_line("nosync", False, 0.3, True, deterministic=True).startswith(
        "Same parameters after training: NO (deterministic kernels")


def test_an_update_other_than_local_sgd_is_not_compared_and_a_bad_option_is_one_line(runners, capsys):
    phases, _ = runners
    assert phases.main(["--model", "resnet18", "--size", "tiny", "--iterations", "4", "--chunk", "2",
                        "--batch", "4", "--algo", "streaming_diloco"]) == 0
    assert "Parameters not compared: its outer optimizer" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--set bogus: not a field of algo=dreamddp"):
        phases.main(["--algo", "dreamddp", "--set", "bogus=1"])
    with pytest.raises(SystemExit, match="--algo ddp: runs without the partial-sync engine"):
        phases.main(["--algo", "ddp"])


def test_phase_overhead_is_each_phase_difference_inside_each_repetition(runners):
    _, report = runners
    reps = {0: {"nosync@ideal": record(0.100, 0.210, 0.012, [[0.3]]), "plain@ideal": record(0.101, 0.200, 0.010, [[0.3]])},
            1: {"nosync@ideal": record(0.100, 0.230, 0.010, [[0.3]]), "plain@ideal": record(0.100, 0.200, 0.010, [[0.3]])},
            2: {"plain@ideal": record(0.1, 0.2, 0.0, [[0.3]])}}  # no nosync: not a pair
    got = report.phase_overhead(reps)
    assert list(got) == list(report.PHASES)
    assert got["forward"] == pytest.approx((-0.5, -1.0, 0.0))
    assert got["backward"] == pytest.approx((20.0, 10.0, 30.0))
    assert got["step and the rest"] == pytest.approx((1.0, 0.0, 2.0))
    assert report.phase_overhead({0: {"plain@ideal": reps[0]["plain@ideal"]}}) == {}


def test_host_ops_profiles_both_runs_on_and_they_still_train_alike(runners, capsys):
    """--host-ops: more iterations of each under torch.profiler, a table of the operators whose
    host time differs most; DreamDDP launches all-reduces, the bare model none."""
    phases, _ = runners
    assert phases.main(["--model", "resnet18", "--size", "tiny", "--iterations", "8", "--chunk", "4",
                        "--batch", "4", "--algo", "dreamddp", "--set", "H=2", "--host-ops", "4"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| `c10d::allreduce_` |"))
    assert row.split("|")[3].strip() == "0.000 (0)" and "(0)" not in row.split("|")[2]
    assert "| every operator |" in out and "Same parameters after training: yes." in out
    with pytest.raises(SystemExit):
        phases.main(["--host-ops", "-1"])
