"""Every recipe of conf/algo (an algorithm plus the sync pipeline's stages), exact on a fake
communicator against a reference written here per parameter: torch.optim for outer and inner
steps, the codecs' rules written out again (top-k by sorting, the 2-bit grid, a DCT matrix from
its formula). Each recipe also resumes bitwise from its algorithm's saved state."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from dreamddp.algorithms import ALGORITHMS, build_algorithm
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from engine_fixtures import batch, engine_step, loss_of, small_model

CONF = Path(__file__).resolve().parents[1] / "conf" / "algo"
RECIPES = sorted(p.stem for p in CONF.glob("*.yaml") if "recipe:" in p.read_text())
FACTOR = 0.75  # the fake world's mean of any all-reduced tensor: ranks hold t and t/2


def half_peer(kind, tag, t):
    return [t, t * 0.5] if kind == "all_reduce" else [t, t]  # a compressed payload: the same on both ranks


def recipe_cfg(name: str, **kw):
    values = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))
    values.pop("defaults")
    return ALGORITHMS[values["name"]].Config(**{**values, **kw})


def flat(units):
    return torch.cat([p.detach().reshape(-1) for u in units for p in u.params])


def set_flat(units, vec):
    """In place: the engine's parameters are views of its flat buffer."""
    params = [p for u in units for p in u.params]
    with torch.no_grad():
        for p, v in zip(params, vec.split([p.numel() for p in params])):
            p.copy_(v.view_as(p))


def ours(name: str, steps: int, opt="sgd", setup=None, comm=None, land=True, **kw):
    model = small_model()
    algo = build_algorithm(recipe_cfg(name, **kw), setup)
    engine = PartialSyncEngine(model, enumerate_units(model), comm or FakeCommunicator(2, 0, half_peer), algo)
    optimizer = make_inner(opt, model)
    for t in range(steps):
        engine_step(engine, model, optimizer, t)
    engine.land_all() if land else engine.flush()
    return flat(engine.units), engine, optimizer


def make_inner(opt, model):
    if opt == "adam":
        return torch.optim.Adam(model.parameters(), lr=0.01)
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def local_steps(steps, opt="sgd", every=None, model=None):
    """The reference's loop: one local step per iteration, ``every(t, units, optimizer)`` after it."""
    model = model or small_model()
    units = enumerate_units(model)
    optimizer = make_inner(opt, model)
    for t in range(steps):
        optimizer.zero_grad()
        loss_of(model, batch(0, t)).backward()
        optimizer.step()
        if every:
            every(t, units, optimizer)
    return units, optimizer


# ---- the references ----
def diloco_reference(steps, H, eager=False, lr=0.7, mu=0.9):
    """Outer Nesterov on the whole model every H (DiLoCo); eager: Kale et al.'s rule."""
    state = {}

    def outer(t, units, _):
        if (t + 1) % H:
            return
        theta = flat(units)
        if "A" not in state:
            state["A"] = theta.clone() * 0 + state.get("start")
            state["A"].requires_grad_()
            state["opt"] = torch.optim.SGD([state["A"]], lr=lr, momentum=mu, nesterov=True)
        A, opt = state["A"], state["opt"]
        delta = A.detach() - theta
        if not eager:
            A.grad = FACTOR * delta
        else:
            prev = state.get("prev")
            A.grad = delta / 2 if prev is None else state["mean"] + (delta - prev) / 2
            state["prev"], state["mean"] = delta, FACTOR * delta
        opt.step()
        set_flat(units, A.detach().clone())

    model = small_model()
    state["start"] = flat(enumerate_units(model)).clone()
    units, _ = local_steps(steps, every=outer, model=model)
    if eager and "prev" in state:  # the run's end lands the last mean
        A = state["A"]
        A.grad = state["mean"] + ((A.detach() - flat(units)) - state["prev"]) / 2
        state["opt"].step()
        set_flat(units, A.detach().clone())
    return flat(units)


def topk_2bit(v, k):
    """SparseLoCo's Q(TopK(v)) on one chunk: the k largest magnitudes on the 4-level grid of their absmax."""
    idx = v.abs().argsort(descending=True, stable=True)[:k]
    kept = v[idx]
    s = kept.abs().max()
    if s == 0:
        return torch.zeros_like(v)
    q = torch.clamp(torch.round((kept / s * 3 + 3) / 2), 0, 3)
    out = torch.zeros_like(v)
    out[idx] = s * (2 * q - 3) / 3
    return out


def sparseloco_reference(steps, H, k=32, beta=0.95):
    state = {}

    def outer(t, units, _):
        if (t + 1) % H:
            return
        theta = flat(units)
        v = (state["A"] - theta) + beta * state["e"]
        sent = topk_2bit(v, k)
        state["e"] = v - sent
        state["A"] = state["A"] - sent  # the mean of what both ranks sent (the same payload)
        set_flat(units, state["A"].clone())

    model = small_model()
    state["A"] = flat(enumerate_units(model)).clone()
    state["e"] = torch.zeros_like(state["A"])
    units, _ = local_steps(steps, every=outer, model=model)
    return flat(units)


def dct_matrix(n):
    i = torch.arange(n, dtype=torch.float64)
    m = torch.cos(math.pi / n * (i[None, :] + 0.5) * i[:, None]) * math.sqrt(2 / n)
    m[0] /= math.sqrt(2)
    return m.float()


def demo_reference(steps, chunk=64, beta=0.999):
    """Every step: v = g + beta e; the largest DCT coefficient of each chunk of v (fp16) sent,
    e <- v - its inverse; the optimizer steps on the mean (the same payload on both ranks)."""
    model = small_model()
    units = enumerate_units(model)
    params = [p for u in units for p in u.params]
    opt = make_inner("sgd", model)
    D = dct_matrix(chunk)
    e = None
    for t in range(steps):
        opt.zero_grad()
        loss_of(model, batch(0, t)).backward()
        g = torch.cat([p.grad.reshape(-1) for p in params])
        e = torch.zeros_like(g) if e is None else e
        v = g + beta * e
        n = v.numel()
        rows = torch.zeros(-(-n // chunk) * chunk)
        rows[:n] = v
        coef = rows.view(-1, chunk) @ D.T
        top = coef.abs().argmax(dim=1, keepdim=True)
        kept = torch.zeros_like(coef).scatter_(1, top, coef.gather(1, top).half().float())
        sent = (kept @ D).reshape(-1)[:n]
        e = v - sent
        torch.nn.utils.vector_to_parameters(sent, [p.grad for p in params])
        opt.step()
    return flat(units)


def desloc_reference(steps, H, every):
    def sync(t, units, optimizer):
        if (t + 1) % H == 0:
            set_flat(units, FACTOR * flat(units))
        for key, k in zip(("exp_avg", "exp_avg_sq"), every):
            if (t + 1) % k == 0:
                for p in optimizer.state:
                    optimizer.state[p][key].mul_(FACTOR)

    units, _ = local_steps(steps, "adam", every=sync)
    return flat(units)


LAYERWISE = {"4": [0, 1], "3": [0], "2": [1], "0": [1]}  # unit "4" syncs twice a window: a bubble fill


def layerwise_reference(steps, H=2, outer_lr=0.7, mu=0.9, codec=None, every=None, opt="sgd"):
    """DreamDDP on LAYERWISE: per unit, at its first sync of a window an outer step (or the
    average), at a further one the average; then the local step."""
    model = small_model()
    units = enumerate_units(model)
    optimizer = make_inner(opt, model)
    by_name = {u.name: u for u in units}
    anchors = {n: flat([by_name[n]]).clone().requires_grad_() for n in LAYERWISE}
    outer = {n: torch.optim.SGD([a], lr=outer_lr, momentum=mu or 0, nesterov=bool(mu)) for n, a in anchors.items()}
    err = {n: torch.zeros_like(a) for n, a in anchors.items()}
    for t in range(steps):
        optimizer.zero_grad()
        loss_of(model, batch(0, t)).backward()
        pos = t % H
        for n, its in LAYERWISE.items():
            if pos not in its:
                continue
            u, A = [by_name[n]], anchors[n]
            delta = A.detach() - flat(u)
            if codec == "sparseloco":
                v = delta + 0.95 * err[n]
                mean = topk_2bit(v, min(32, v.numel()))
                err[n] = v - mean
            else:
                mean = FACTOR * delta
            if codec is None and mu is None:  # plain averaging, in place: no anchor at all
                set_flat(u, FACTOR * flat(u))
            elif pos != its[0]:
                set_flat(u, A.detach() - mean)  # a further sync: the average, no outer step
            elif codec == "sparseloco" or mu is None:
                with torch.no_grad():
                    A.sub_(mean)
                set_flat(u, A.detach().clone())
            else:
                A.grad = mean
                outer[n].step()
                set_flat(u, A.detach().clone())
        optimizer.step()
        for key, k in zip(("exp_avg", "exp_avg_sq"), every or ()):
            if (t + 1) % k == 0:
                for p in optimizer.state:
                    optimizer.state[p][key].mul_(FACTOR)
    return flat(units)


def dreamddp_setup():
    return {"schedule": {"H": 2, "schedule": LAYERWISE}}


EXACT = {
    "diloco": (lambda: ours("diloco", 9, H=3)[0], lambda: diloco_reference(9, 3)),
    "diloco_eager": (lambda: ours("diloco_eager", 9, H=3)[0], lambda: diloco_reference(9, 3, eager=True)),
    "sparseloco": (lambda: ours("sparseloco", 9, H=3)[0], lambda: sparseloco_reference(9, 3)),
    "demo": (lambda: ours("demo", 5)[0], lambda: demo_reference(5)),
    "desloc": (lambda: ours("desloc", 8, "adam", H=2, moments_every=[4, 8])[0],
               lambda: desloc_reference(8, 2, [4, 8])),
    "dreamddp_diloco": (lambda: ours("dreamddp_diloco", 8, setup=dreamddp_setup(), H=2)[0],
                        lambda: layerwise_reference(8)),
    "dreamddp_sparseloco": (lambda: ours("dreamddp_sparseloco", 8, setup=dreamddp_setup(), H=2)[0],
                            lambda: layerwise_reference(8, codec="sparseloco")),
    "dreamddp_desloc": (lambda: ours("dreamddp_desloc", 8, "adam", setup=dreamddp_setup(), H=2, moments_every=[4, 8])[0],
                        lambda: layerwise_reference(8, mu=None, every=[4, 8], opt="adam")),
}


def test_every_recipe_has_an_exact_test():
    assert sorted(EXACT) == RECIPES


@pytest.mark.parametrize("name", sorted(EXACT))
def test_the_recipe_follows_its_reference(name):
    got, want = (f() for f in EXACT[name])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", RECIPES)
def test_the_recipe_resumes_bitwise_from_its_saved_state(name):
    opt = "adam" if "desloc" in name else "sgd"
    setup = dreamddp_setup() if name.startswith("dreamddp") else None
    kw = {"H": 2, **({"moments_every": [2, 4]} if "desloc" in name else {})}
    whole, _, _ = ours(name, 7, opt, setup, **kw)
    _, engine, optimizer = ours(name, 3, opt, setup, land=False, **kw)
    params, state, opt_state = flat(engine.units).clone(), engine.algorithm.state_dict(), optimizer.state_dict()
    model = small_model()
    engine2 = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(2, 0, half_peer),
                                build_algorithm(recipe_cfg(name, **kw), setup))
    set_flat(engine2.units, params)
    optimizer2 = make_inner(opt, model)
    optimizer2.load_state_dict(opt_state)
    engine2.algorithm.load_state_dict(state)
    for t in range(3, 7):
        engine_step(engine2, model, optimizer2, t)
    engine2.land_all()
    assert torch.equal(flat(engine2.units), whole)
