"""``dreamddp-bench gpu``'s parts that need no GPU, on the committed records.

References: the ring all-reduce's bytes on the wire and rank correlation's definition.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dreamddp.bench import gpu, gpu_profiles
from dreamddp.study import load

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "results" / "gpu"


def test_spearman_is_pearson_on_ranks_with_shared_ranks_for_ties():
    assert gpu_profiles.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert gpu_profiles.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties: ranks (1.5, 1.5, 3, 4) against (1, 2, 3, 4): Pearson of those ranks
    assert gpu_profiles.spearman([5, 5, 7, 9], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)


def test_profiles_on_a_link_take_the_ring_all_reduce_of_their_bytes():
    from dreamddp.schedule.profile import load_profile

    prof = load_profile(GPU / "h100" / "profiles" / "gpt2_high" / "profile")
    linked = gpu_profiles.on_link(prof, prof.nbytes, 32, 10.0)
    u = "transformer.h.0.mlp.c_fc"
    assert linked.comm[u] == pytest.approx(2 * 31 / 32 * prof.nbytes[u] * 8 / 10e9)
    assert gpu_profiles.on_link(prof, {}, 32, 10.0).comm[u] == 0.0  # a layer with no bytes of ours


def test_bad_profile_arguments_are_one_line_errors(capsys):
    assert gpu_profiles.main(["--model", "gpt2", "--ours", "no-equals-sign", "--authors", "x"]) == 2
    assert "expected LABEL=DIR" in capsys.readouterr().err


def test_the_gpu_study_takes_the_paper_models_on_cuda_and_its_steps_name_its_parts():
    from dreamddp.bench import study_run

    study = study_run.select(load(gpu.STUDY), study_run.parse_args([str(gpu.STUDY)]))
    parts = {p.name: p for p in study.parts}
    llama = study_run.job_list(study, parts["llama2"])[0][2]
    assert llama["memory"] is False and "model.size=paper" in llama["base"] and "cluster.device=cuda" in llama["base"]
    assert study_run.job_list(study, parts["gpt2"])[0][2]["memory"]
    named = {part for step in study.settings["steps"].values() for part, _ in step.get("parts", [])}
    assert named == set(parts) and list(study.settings["steps"]) == list(gpu.STEPS)


@pytest.mark.parametrize("name,kind", [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
                                       ("NVIDIA A100-SXM4-80GB", "a100"), ("", "gpu")])
def test_a_device_gets_the_folder_of_its_kind(name, kind):
    assert gpu.kind_of(name) == kind


def test_reports_cover_every_job_of_every_device_folder(tmp_path, capsys):
    """--reports on a folder of two device kinds: each job's README and the side by side, whose
    table has a column per device that timed the model."""
    for job in ("h200/gpt2_ddp", "h100/gpt2_ddp", "h200/gpt2_reps"):
        shutil.copytree(GPU / job, tmp_path / job, ignore=shutil.ignore_patterns("README.md"))
    assert gpu.main(["--reports", "--gpu", str(tmp_path), "--cpu", str(ROOT / "results" / "bench" / "headline"),
                     "--mix"]) == 0  # committed records of several commits
    assert all((tmp_path / job / "README.md").is_file() for job in ("h200/gpt2_ddp", "h100/gpt2_ddp", "h200/gpt2_reps"))
    side = (tmp_path / "README.md").read_text()
    assert "| algorithm | H200 x DreamDDP |" in side and "| flsgd |" in side
    assert "H100 h100/gpt2_ddp" in side and "H200 h200/gpt2_ddp" in side  # the overhead table: both machines
    # it opens with the result card: a block per machine and model, at most 8 columns, before the details
    card = side[side.index("## Result card"):side.index("\n## gpt2")]
    assert "H200, h200/gpt2_reps: " in card
    headers = [line for line in card.splitlines() if line.startswith("| algorithm |")]
    assert headers and all(line.count("|") - 1 <= 8 for line in headers)
