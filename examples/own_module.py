"""Your own nn.Module, your own loop, three added calls (docs/library.md).

    torchrun --nproc-per-node 2 examples/own_module.py --algo diloco --iterations 20
    torchrun --nproc-per-node 4 examples/own_module.py --algo diloco --shards 2   # 2 replicas x FSDP2 on 2
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn

import dreamddp


class Net(nn.Module):  # any module: its units (modules that own parameters) are found from it
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 64), nn.GELU())
        self.head = nn.Linear(64, 4)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo", default="diloco")  # an algorithm or a recipe of conf/algo
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--H", type=int, default=5)
    parser.add_argument("--link", default=None)  # a conf/bandwidth name, e.g. 1gbit; default: ideal
    parser.add_argument("--shards", type=int, default=1)  # ranks per replica, sharded with FSDP2
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank // args.shards)  # replicas start apart: wrap() gives every one rank 0's parameters
    model = Net()
    group = None
    if args.shards > 1:  # replicas x shards: sync across replicas on each rank's shards
        group = dreamddp.mesh(dist.get_world_size() // args.shards, args.shards)
        model = dreamddp.shard(model, group)  # before the optimizer: the parameters become DTensors
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    teacher = torch.Generator().manual_seed(0)  # one task, each rank its own samples
    w = torch.randn(32, 4, generator=teacher)
    data = torch.Generator().manual_seed(100 + rank)

    def batch():
        x = torch.randn(64, 32, generator=data)
        return x, (x @ w).argmax(dim=1)

    def loss_of(x, y):
        return nn.functional.cross_entropy(model(x), y)

    sync = dreamddp.wrap(model, optimizer, dreamddp.algo_config(args.algo, H=args.H), link=args.link, group=group,
                         loss_fn=lambda: loss_of(*batch()))  # loss_fn: for DreamDDP's start-up profile
    for _ in range(args.iterations):
        sync.begin()                   # 1. before the forward
        loss = loss_of(*batch())
        loss.backward()
        sync.step()                    # 2. in place of optimizer.step()
    sync.close()                       # 3. what is still in flight lands

    spread = dreamddp.replica_difference(model, group)
    if rank == 0:
        print(f"algo={args.algo}: final loss {loss.item():.4f} after {args.iterations} iterations")
        print(f"replicas agree: {spread == 0.0} (largest difference {spread:.2e})")
    del sync  # its communicator's collectives go before the group does
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
