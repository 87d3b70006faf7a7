"""A Hugging Face transformers model, built from its config (no download, not from dreamddp's
registry), trained with DreamDDP's layer-wise schedule, profiled at start-up (docs/library.md).

    HF_HUB_OFFLINE=1 torchrun --nproc-per-node 2 examples/hf_transformers.py --algo dreamddp --iterations 20
"""

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from dreamddp import WarmupConfig, algo_config, replica_difference, wrap  # noqa: E402  (before transformers: dreamddp/_compat.py)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

VOCAB, LENGTH = 256, 32


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo", default="dreamddp")  # or diloco, dreamddp_diloco, ...
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--H", type=int, default=5)
    parser.add_argument("--link", default=None)  # a conf/bandwidth name, e.g. 1gbit; default: ideal
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=LENGTH,
                                                bos_token_id=0, eos_token_id=0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(100 + rank)

    def batch():  # sequences counting up by a stride: learnable from the context
        start = torch.randint(0, VOCAB, (8, 1), generator=data)
        stride = torch.randint(1, 4, (8, 1), generator=data)
        return (start + stride * torch.arange(LENGTH)) % VOCAB

    def loss_of(ids):
        return model(input_ids=ids, labels=ids).loss

    # DreamDDP profiles the live job before training (undone after) and schedules its units from it
    sync = wrap(model, optimizer, algo_config(args.algo, H=args.H), link=args.link,
                loss_fn=lambda: loss_of(batch()), warmup=WarmupConfig(profile_iterations=3))
    if rank == 0 and "schedule" in sync.setup:
        groups = sync.algorithm.describe()["groups"]
        print(f"{len(sync.units)} units; synced per iteration of the window: {[len(g) for g in groups]}")
    for _ in range(args.iterations):
        sync.begin()
        loss = loss_of(batch())
        loss.backward()
        sync.step()
    sync.close()

    spread = replica_difference(model)
    if rank == 0:
        print(f"algo={args.algo}: final loss {loss.item():.4f} after {args.iterations} iterations")
        print(f"replicas agree: {spread == 0.0} (largest difference {spread:.2e})")
    del sync  # its communicator's collectives go before the group does
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
