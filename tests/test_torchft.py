"""DiLoCo against torchft's (torchft 0.2.0, torchft/local_sgd.py): the same parameters.

Configuration: 2 gloo processes, each one replica.  The test process runs torchft's own
lighthouse (``torchft._torchft.LighthouseServer``, min_replicas=2); each worker starts
a TCPStore of its own (a replica of one rank) and a real ``torchft.Manager`` on a
``ProcessGroupGloo`` (synchronous quorum, as DiLoCo requires; ``init_sync=False``: both
replicas build the model from one seed, so there is nothing to heal at step 0).

In the same loop, on the same batches, each worker trains two copies of one model:
torchft's ``DiLoCo(manager, [model], inner, outer, sync_every=H)`` (one fragment: every
H inner steps the pseudo-gradient anchor - theta is averaged over the replicas, the
parameters reset to the anchor, and the outer optimizer steps on it; alpha 0), and
ours, ``dreamddp.wrap(model, inner, algo_config("diloco", H=H))`` over the default gloo
group, with the same outer optimizer settings (the recipe's: SGD lr 0.7, momentum 0.9,
Nesterov).  After 3 outer steps the parameters agree to float tolerance: torchft sums
then divides, ours averages in one all-reduce, so the last bits may differ.
"""

from __future__ import annotations

import torch
from torch import nn

from dist_util import free_port, run_workers

H, OUTER_STEPS = 3, 3


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def _loss(model, rank: int, t: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 * t + rank)
    x, y = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
    return nn.functional.mse_loss(model(x), y)


def _both(rank: int, world: int, lighthouse: str, store_port: int):
    from datetime import timedelta

    from torch.distributed import TCPStore
    from torchft import Manager, ProcessGroupGloo
    from torchft.local_sgd import DiLoCo

    import dreamddp

    ft_model, our_model = _model(), _model()
    ft_inner = torch.optim.SGD(ft_model.parameters(), lr=0.05)
    our_inner = torch.optim.SGD(our_model.parameters(), lr=0.05)
    cfg = dreamddp.algo_config("diloco", H=H)
    ft_outer = torch.optim.SGD(ft_model.parameters(), lr=cfg.outer_lr, momentum=cfg.outer_momentum, nesterov=True)

    store = TCPStore("localhost", store_port + rank, is_master=True, wait_for_workers=False)  # noqa: F841  (kept alive)
    manager = Manager(pg=ProcessGroupGloo(), load_state_dict=None, state_dict=None, min_replica_size=2,
                      use_async_quorum=False, replica_id=f"replica{rank}", store_addr="localhost",
                      store_port=store_port + rank, rank=0, world_size=1, lighthouse_addr=lighthouse,
                      timeout=timedelta(seconds=60), init_sync=False)
    sync = dreamddp.wrap(our_model, our_inner, cfg)
    try:
        with DiLoCo(manager, [ft_model], ft_inner, ft_outer, sync_every=H):
            for t in range(H * OUTER_STEPS):
                ft_inner.zero_grad()
                _loss(ft_model, rank, t).backward()
                ft_inner.step()  # its post-step hook syncs every H-th step

                sync.begin()
                _loss(our_model, rank, t).backward()
                sync.step()
        sync.close()
        steps = manager.current_step()
    finally:
        manager.shutdown(wait=False)
    params = lambda m: [p.detach().clone() for p in m.parameters()]  # noqa: E731
    return params(ft_model), params(our_model), steps, params(_model())


def test_diloco_equals_torchft_diloco_after_a_few_outer_steps():
    from torchft._torchft import LighthouseServer

    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2)
    try:
        results = run_workers(_both, 2, lighthouse.address(), free_port())
    finally:
        lighthouse.shutdown()
    for ft, ours, steps, start in results:
        assert steps == OUTER_STEPS  # torchft committed every outer step
        assert any(not torch.equal(a, b) for a, b in zip(ft, start))  # it trained
        for a, b in zip(ft, ours):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(results[0][1], results[1][1]):  # ours: the replicas agree after the last outer step
        assert torch.equal(a, b)
