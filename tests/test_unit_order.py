"""Units in the true backward order: per-unit backward times all positive, in order, on every model.

Registration order is not backward order (HF Llama registers its RMSNorms after
the MLP but runs them first); with it, the profiler charged q/k/v/o/gate/up/down
0 ms of backward.  The measured gradient-ready order fixes that.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from dreamddp.algorithms import build_algorithm
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import reorder_units
from dreamddp.models import MODELS, build_model, model_units
from dreamddp.models.tasks import compute_loss
from dreamddp.warmup.profiler import measure_profile
from engine_fixtures import algo_cfg


def _batch(name: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    if MODELS[name].task == "lm":
        return torch.randint(MODELS[name].sizes["tiny"]["vocab_size"], (2, 32), generator=g)
    classes = MODELS[name].sizes["tiny"]["num_classes"]
    return torch.randn(4, 3, 32, 32, generator=g), torch.randint(classes, (4,), generator=g)


@pytest.mark.parametrize("name", list(MODELS))
def test_profiled_backward_times_are_positive_and_in_order(name):
    torch.manual_seed(0)
    model = build_model(name, "tiny")
    task = MODELS[name].task
    sample = _batch(name, 0)
    units = model_units(model, lambda: compute_loss(task, model, sample))
    assert all(p.grad is None for p in model.parameters())  # the measuring pass leaves no trace
    engine = PartialSyncEngine(model, units, FakeCommunicator(world_size=1), build_algorithm(algo_cfg("nosync")))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seeds = iter(range(1, 100))
    engine.sample_every = 1
    engine.begin_iteration(0)
    compute_loss(task, model, sample).backward()
    engine.end_backward()
    engine.step(opt)
    ready = engine.after_step().unit_ready
    assert ready == sorted(ready), "gradients became ready out of unit order"
    profile = measure_profile(engine, engine.comm, opt, lambda: compute_loss(task, model, _batch(name, next(seeds))),
                              iterations=2, comm_repeats=0)
    zero = [u for u in profile.units if not profile.bp[u] > 0]
    assert zero == [], f"{name}: units with no backward time: {zero[:5]}"


def test_llama_norms_come_after_their_blocks_in_backward_order():
    model = build_model("llama2", "tiny")
    sample = _batch("llama2", 0)
    names = [u.name for u in model_units(model, lambda: compute_loss("lm", model, sample))]
    # The MLP runs after post_attention_layernorm, so its gradients are ready first.
    assert names.index("model.layers.1.mlp.down_proj") < names.index("model.layers.1.post_attention_layernorm")
    assert names.index("model.layers.1.self_attn.o_proj") < names.index("model.layers.1.input_layernorm")
    assert names[0] == "lm_head" and names[-1] == "model.embed_tokens"


def test_reorder_adopts_another_ranks_order():
    model = build_model("resnet18", "tiny")
    units = model_units(model)
    names = [u.name for u in reversed(units)]
    again = reorder_units(units, names)
    assert [u.name for u in again] == names and [u.index for u in again] == list(range(len(units)))
    with pytest.raises(ValueError):
        reorder_units(units, names[:-1])


def test_the_profile_totals_come_from_passes_without_marks(monkeypatch):
    """Marks that cost time (on an H200 GPT-2's 75 CUDA events lengthened its backward 10-14%:
    results/gpu/README.md, run 6) give each unit its share, not the totals: with every mark
    made 2 ms dear, the profile's backward stays at an unmarked pass's."""
    from dreamddp.clock import Stamps

    torch.manual_seed(0)
    model = build_model("resnet18", "tiny")
    sample = _batch("resnet18", 0)
    loss_fn = lambda: compute_loss("image", model, sample)  # noqa: E731
    units = model_units(model, loss_fn)
    engine = PartialSyncEngine(model, units, FakeCommunicator(world_size=1), build_algorithm(algo_cfg("nosync")))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    unmarked = []
    for t in range(5):
        engine.begin_iteration(t)
        loss = loss_fn()
        t0 = engine.clock()
        loss.backward()
        unmarked.append(engine.clock() - t0)
        engine.end_backward()
        engine.step(opt)
        engine.after_step()
    mark = Stamps.mark
    monkeypatch.setattr(Stamps, "mark", lambda self, i: (time.sleep(0.002), mark(self, i)))
    profile = measure_profile(engine, engine.comm, opt, loss_fn, iterations=3, comm_repeats=0)
    assert all(profile.bp[u] > 0 for u in profile.units)  # the marked passes still share it out
    marks_cost = 0.002 * len(units)  # what one marked backward pass adds
    assert profile.meta["backward_total"] < statistics.median(unmarked) + marks_cost / 2
