"""The authors' cost model against their own published numbers, and our
scheduler against their schedules under that model."""

from __future__ import annotations

import json

import pytest

from dreamddp.schedule import load_profile, make_schedule, read_schedule
from dreamddp.schedule.authors_model import aligned, modelled_times
from dreamddp.schedule.compare import reference_root
from dreamddp.schedule.cost import total_wait, window_waits
from dreamddp.schedule.profile import scaled

ROOT = reference_root()
ARTIFACT = sorted(p.parent for p in (ROOT / "artifact").glob("*/*/*/modelled_times.json"))
IDS = [str(p.relative_to(ROOT / "artifact")) for p in ARTIFACT]


def test_all_artifact_profiles_found():
    assert len(ARTIFACT) == 8  # gpt2 x3, llama2-124M x2, Qwen2.5-7B x3


@pytest.mark.parametrize("d", ARTIFACT, ids=IDS)
@pytest.mark.parametrize("which", ["our_schedule", "their_schedule"])
def test_modelled_times_match_artifact(d, which):
    profile = load_profile(d)
    ref = json.loads((d / "modelled_times.json").read_text())
    schedule = read_schedule(d / "schedule.json")[1] if which == "their_schedule" else None
    got = modelled_times(profile, 10, schedule)
    for algo, want in ref["algorithm_times"]["H_10"].items():
        assert got["algorithm_times"][algo] == pytest.approx(want, rel=0.01), algo
    for name, want in ref["speedups"]["H_10"].items():
        assert got["speedups"][name] == pytest.approx(want, rel=0.01), name
    # everything but DreamDDP's wait is the same arithmetic as theirs
    for algo in ("sgd", "pipe_sgd", "localsgd", "pipe_seq_localsgd"):
        assert got["algorithm_times"][algo] == pytest.approx(ref["algorithm_times"]["H_10"][algo], rel=1e-9)


@pytest.mark.parametrize("d", ARTIFACT, ids=IDS)
def test_our_schedule_never_worse_than_theirs(d):
    al = aligned(load_profile(d))
    H, theirs = read_schedule(d / "schedule.json")
    assert set(theirs) == set(al.units)
    for bubble in (False, True):
        ours = make_schedule(al, H, "dreamddp", bubble=bubble)
        assert total_wait(al, H, ours) <= total_wait(al, H, theirs) + 1e-12
        assert total_wait(al, H, ours) >= total_wait(al, H, make_schedule(al, H, "optimal", False)) - 1e-12


# Paper-v1 32-GPU table (the paper-v1 iteration-time table), A6000 profiles x fixed multipliers (bp, comm).
PAPER_V1 = {
    "resnet18": ((2, 1), (0.8812, 0.5598, 0.1571, 0.1248, 0.1115)),
    "resnet50": ((1, 1), (1.7778, 1.1205, 0.2973, 0.2288, 0.1957)),
    "gpt2": ((10, 5), (5.2176, 3.3897, 1.1002, 0.8690, 0.8319)),
    "llama2": ((10, 5), (5.2367, 3.3630, 1.0162, 0.7869, 0.7241)),
}


@pytest.mark.parametrize("model", sorted(PAPER_V1))
def test_paper_v1_table(model):
    (kb, kc), row = PAPER_V1[model]
    profile = scaled(load_profile(ROOT / "paper-v1/A6000" / model), bp=kb, comm=kc)
    got = modelled_times(profile, 10)["algorithm_times"]
    assert list(got.values()) == pytest.approx(list(row), rel=0.01)


def test_qwen_units_all_aligned():
    p = load_profile(ROOT / "artifact/Qwen2.5-7B/16/1gbit")
    assert len(p.units) == 1291 and len(p.comm) == 392
    assert "dropped_comm" not in p.meta
    assert aligned(p).units == [u for u in p.units if ".lora_" in u and u.endswith(("lora_A", "lora_B"))]


def test_bubble_fill_adds_syncs_without_extra_wait():
    al = aligned(load_profile(ROOT / "artifact/gpt2/8/10gbit"))
    plain = make_schedule(al, 10, bubble=False)
    filled = make_schedule(al, 10, bubble=True)
    extra = {u: its for u, its in filled.items() if len(its) > 1}
    assert extra  # the link idles early in backward at 10 Gbit/s
    for a, b in zip(window_waits(al, 10, filled), window_waits(al, 10, plain)):
        assert a <= b + 1e-12
    first = {g: min(al.units.index(u) for u, its in plain.items() if g in its) for g in range(10)}
    for u, its in extra.items():
        assert all(al.units.index(u) < first[g] for g in its if g not in plain[u])
