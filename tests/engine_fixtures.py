"""Small models and configs shared by the engine and algorithm tests."""

from __future__ import annotations

import torch
from torch import nn

from dreamddp.algorithms import ALGORITHMS, build_algorithm


def small_model(seed: int = 0) -> nn.Module:
    """Four units of very different sizes (backward order: 4, 3, 2, 0)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4))


def algo_cfg(name: str, **kw):
    """The algorithm's own Config, H=2 unless given (a key it does not declare is an error)."""
    return ALGORITHMS[name].Config(name=name, **{"H": 2, **kw})


def build(name: str, sched: dict | None = None, collectives: list | None = None, **kw):
    """``build_algorithm`` on ``algo_cfg(name, **kw)``; ``sched`` (and its ``collectives``)
    is a schedule set-up (dreamddp)."""
    setup = None
    if sched is not None:
        setup = {"schedule": {"H": kw.get("H", 2), "schedule": sched}}
        if collectives is not None:
            setup["schedule"]["collectives"] = collectives
    return build_algorithm(algo_cfg(name, **kw), setup)


def batch(rank: int, t: int, n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + t)
    return torch.randn(n, 8, generator=g), torch.randn(n, 4, generator=g)


def loss_of(model: nn.Module, b) -> torch.Tensor:
    x, y = b
    return nn.functional.mse_loss(model(x), y)


def make_opt(name: str, model: nn.Module):
    """SGD with momentum or Adam (both with weight decay) and an lr that changes every step."""
    if name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0 / (1 + t))


def engine_step(engine, model: nn.Module, opt, t: int, rank: int = 0, sched=None, before_step=None):
    """One training iteration through the engine's lifecycle, as the trainer runs it (clipping at
    the engine's own grad_clip)."""
    engine.begin_iteration(t)
    loss_of(model, batch(rank, t)).backward()
    engine.end_backward()
    if before_step is not None:
        before_step()
    engine.step(opt)
    if sched is not None:
        sched.step()
    return engine.after_step()
