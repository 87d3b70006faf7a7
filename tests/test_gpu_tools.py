"""The tools that made results/gpu/, run here on the committed records (no GPU needed).

References: the committed reports (each regenerates byte-identically from its run
records), the ring all-reduce's bytes on the wire, and rank correlation's definition.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "runners"))
GPU = ROOT / "results" / "gpu"
AUTHORS = ROOT.parent / "shared" / "reference" / "official-profiles" / "paper-v1" / "H100"


def test_spearman_is_pearson_on_ranks_with_shared_ranks_for_ties():
    gpu_profiles = importlib.import_module("gpu_profiles")
    assert gpu_profiles.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert gpu_profiles.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties: ranks (1.5, 1.5, 3, 4) against (1, 2, 3, 4): Pearson of those ranks
    assert gpu_profiles.spearman([5, 5, 7, 9], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)


def test_profiles_on_a_link_take_the_ring_all_reduce_of_their_bytes():
    gpu_profiles = importlib.import_module("gpu_profiles")
    from dreamddp.schedule.profile import load_profile

    prof = load_profile(GPU / "profiles" / "gpt2_high" / "profile")
    linked = gpu_profiles.on_link(prof, prof.nbytes, 32, 10.0)
    u = "transformer.h.0.mlp.c_fc"
    assert linked.comm[u] == pytest.approx(2 * 31 / 32 * prof.nbytes[u] * 8 / 10e9)
    assert gpu_profiles.on_link(prof, {}, 32, 10.0).comm[u] == 0.0  # a layer with no bytes of ours


def test_side_by_side_regenerates_from_the_committed_reports(tmp_path):
    for _, folder in importlib.import_module("gpu_summary").DEVICES:
        shutil.copytree(GPU / folder, tmp_path / folder)
    importlib.import_module("gpu_summary").main(["--gpu", str(tmp_path), "--cpu", str(ROOT / "results" / "bench")])
    assert (tmp_path / "side_by_side.md").read_text() == (GPU / "side_by_side.md").read_text()


@pytest.mark.skipif(not AUTHORS.is_dir(), reason="needs ../shared beside the checkout")
@pytest.mark.parametrize("model", ["gpt2", "llama2"])
def test_profile_tables_regenerate_from_the_committed_profiles(tmp_path, model):
    gpu_profiles = importlib.import_module("gpu_profiles")
    ours = [f"fp32={GPU / 'profiles' / f'{model}_highest' / 'profile'}",
            f"tf32={GPU / 'profiles' / f'{model}_high' / 'profile'}"]
    assert gpu_profiles.main(["--model", model, "--ours", *ours, "--authors", str(AUTHORS / model),
                              "--out", str(tmp_path)]) == 0
    assert (tmp_path / f"profiles_{model}.md").read_text() == (GPU / f"profiles_{model}.md").read_text()


def test_gpu_bench_reports_regenerate_from_their_records(tmp_path):
    bench_report = importlib.import_module("bench_report")
    for name in ("bench/gpt2", "bench/resnet18", "h100/gpt2", "h100/gpt2_ddp", "h100/resnet18_single", "h200/gpt2",
                 "h200/resnet18_single", "h200_run6/gpt2_overlap_plan", "h100_run9/gpt2",
                 "h200_run10/gpt2", "h200_run10/gpt2_ddp"):
        bench_report.write(str(GPU / name / "runs"), str(tmp_path / name))
        assert (tmp_path / name / "README.md").read_text() == (GPU / name / "README.md").read_text()


def test_bad_profile_arguments_are_one_line_errors(capsys):
    gpu_profiles = importlib.import_module("gpu_profiles")
    assert gpu_profiles.main(["--model", "gpt2", "--ours", "no-equals-sign", "--authors", "x"]) == 2
    assert "expected LABEL=DIR" in capsys.readouterr().err


def test_the_paper_preset_takes_every_paper_model_and_memory_can_be_left_out():
    bench = importlib.import_module("bench")
    args = bench.parse_args(["--preset", "paper", "--models", "llama2", "resnet50", "--no-memory", "--port", "29600",
                             "--set", "cluster.device=cuda"])
    spec = bench.job_spec(args, "llama2", 0, "/tmp/x")
    assert spec["memory"] is False and "model.size=paper" in spec["base"] and "cluster.device=cuda" in spec["base"]
    assert bench.job_spec(bench.parse_args(["--preset", "paper", "--models", "gpt2"]), "gpt2", 0, "/tmp/x")["memory"]


def test_host_lead_regenerates_from_the_committed_records(tmp_path):
    for _, folder in importlib.import_module("gpu_summary").DEVICES:
        shutil.copytree(GPU / folder, tmp_path / folder)
    assert importlib.import_module("gpu_host_lead").main(["--gpu", str(tmp_path)]) == 0
    assert (tmp_path / "host_lead.md").read_text() == (GPU / "host_lead.md").read_text()


def test_host_lead_replays_the_links_fifo_from_device_ready_times():
    from dreamddp.comm.cost import LinkModel

    host_lead = importlib.import_module("gpu_host_lead")
    link = LinkModel(gbps=8e-3)  # 1 ms per kB of all-reduce on 2 workers: 1 kB per ms of the ring's bytes
    index = {"a": 0, "b": 1}
    row = {"forward": 1.0, "backward": 2.0, "timeline": {
        "unit_ready": [1.5, 2.8],  # device times; the host launched both earlier
        "collectives": [{"tag": "param:a", "kind": "all_reduce", "bytes": 100_000, "launch": 1.2, "deadline": 1.3},
                        {"tag": "param:0-1", "kind": "all_reduce", "bytes": 100_000, "launch": 2.5, "deadline": 2.6},
                        {"tag": "param:a", "kind": "all_reduce", "bytes": 100_000, "launch": 3.5,
                         "deadline": 3.6}]}}  # after backward; deadlines as a link reserved at the launch left them
    leads, later, recorded_less_replay = host_lead.iteration_lead(row, index, link, 2)
    assert leads == pytest.approx([0.3, 0.3])  # a: 1.5 - 1.2; the run 0-1: its last unit, 2.8 - 2.5
    # 0.1 s each. From launches: 1.2-1.3, 2.5-2.6, 3.5-3.6. From the device: 1.5-1.6, 2.8-2.9, 3.5-3.6
    assert later == pytest.approx(0.0)
    assert recorded_less_replay == pytest.approx(0.0)  # the last one was after backward either way
    row["timeline"]["collectives"][2]["launch"] = 2.85  # in backward, its unit long ready: no lead of its own
    row["timeline"]["collectives"][2]["deadline"] = 3.0  # as a link waiting for the device reserved it
    leads, later, recorded_less_replay = host_lead.iteration_lead(row, index, link, 2)
    assert leads == pytest.approx([0.3, 0.3, 0.0])
    # from launches it left at 2.95; from the device it queues behind the second one: 2.9-3.0
    assert later == pytest.approx(0.05)
    assert recorded_less_replay == pytest.approx(0.0)
    row["timeline"]["collectives"].pop()  # now the last is the run 0-1: 2.6 recorded, 2.9 replayed
    _, later, recorded_less_replay = host_lead.iteration_lead(row, index, link, 2)
    assert later == pytest.approx(0.3) and recorded_less_replay == pytest.approx(-0.3)
