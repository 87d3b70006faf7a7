"""The worker loop: one process = one worker.

Read top to bottom: set up (process group, data, model, link, algorithm,
engine, optimizer), optional warm-up passes (bandwidth from a comm/backward
ratio; DreamDDP's profile and schedule) or a checkpoint to resume from, then
the training loop, periodic evaluation, divergence and checkpoints, and the
run record.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from omegaconf import DictConfig

from dreamddp import checkpoint, dist_env
from dreamddp.algorithms import build_algorithm
from dreamddp.algorithms.nosync import NoSync
from dreamddp.comm.communicator import Communicator
from dreamddp.comm.link import build_link
from dreamddp.data import DATASETS, build_data
from dreamddp.engine.divergence import divergence
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.passthrough import DDPEngine
from dreamddp.models import MODELS, build_model, model_units
from dreamddp.models.tasks import compute_loss, evaluate
from dreamddp.optim import build_lr_schedule, build_optimizer
from dreamddp.record import RunRecord
from dreamddp.summary import Progress, summarise
from dreamddp.wandb_log import WandbLogger
from dreamddp.warmup import calibrate_link, predict, prepare_schedule, restore_setup, setup_state


def run_worker(cfg: DictConfig, run_dir: str) -> None:
    ctx = dist_env.init_distributed(cfg)
    rank0 = ctx.rank == 0
    record = RunRecord(run_dir, cfg) if rank0 else None
    wandb = WandbLogger(cfg, run_dir, enabled=rank0)
    try:
        _train(cfg, ctx, run_dir, record, wandb)
    except BaseException as e:
        if record is not None:
            record.fail(f"{type(e).__name__}: {e}")
        wandb.finish(exit_code=1)
        raise
    finally:
        dist_env.shutdown()
    wandb.finish(exit_code=0)


def _train(cfg: DictConfig, ctx, run_dir: str, record: RunRecord | None, wandb: WandbLogger) -> None:
    torch.set_num_threads(cfg.cluster.threads_per_worker)
    tc, mc, dc = cfg.train, cfg.model, cfg.data
    task = MODELS[mc.name].task

    # ---- model (same seed on every rank; rank 0's values are broadcast anyway) ----
    torch.manual_seed(cfg.seed)
    lm = task == "lm"
    model = build_model(
        mc.name, mc.size, num_classes=None if lm else DATASETS[dc.name].num_classes,
        vocab_size=mc.vocab_size if lm else None, block_size=dc.block_size if lm else None,
    ).to(ctx.device)
    units = model_units(model)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)

    # ---- data: every rank its own shard, identical held-out batches ----
    data = build_data(
        dc.name, task=task, rank=ctx.rank, world_size=ctx.world_size, seed=cfg.seed, batch_size=tc.batch_size,
        root=dc.root, block_size=dc.block_size, vocab_size=vocab, eval_fraction=dc.eval_fraction,
        eval_batches=dc.eval_batches, synthetic_size=dc.synthetic_size, num_classes=DATASETS[dc.name].num_classes,
    )
    to_dev = _mover(ctx.device)

    # ---- link, communicator, algorithm, engine ----
    bw = cfg.bandwidth
    # With comm_ratio the rate is provisional until calibrate_link measures backward time.
    link = build_link(bw.backend, bw.gbps or (1.0 if bw.comm_ratio else None), bw.latency_ms, bw.calibration)
    comm = Communicator(link=link)
    algorithm = build_algorithm(cfg.algo)
    next_loss = lambda: compute_loss(task, model, to_dev(next(data.train)))  # noqa: E731
    if algorithm.uses_engine:
        engine = PartialSyncEngine(model, units, comm, NoSync(cfg.algo), sample_every=max(1, cfg.algo.H))
        comm.broadcast(engine.flat.params, src=0)  # identical start, as DDP does
        train_model = model
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None)
        engine, train_model = DDPEngine(ddp, units), ddp
    optimizer = build_optimizer(tc, model.parameters())
    lr_schedule = build_lr_schedule(tc, optimizer)
    profile, start, resumed = None, 0, None
    if tc.resume:
        ckpt, start = checkpoint.check_resume(cfg, ctx.world_size)
        resumed = checkpoint.load(ckpt, ctx.rank, ctx.device)
    if algorithm.uses_engine:
        if resumed is not None:  # the saved run's set-up, not a new measurement
            restore_setup(resumed["setup"], link, algorithm, str(ckpt), record)
        else:  # warm-up passes: measured on the live job, training state restored after
            if bw.comm_ratio:
                calibrate_link(engine, comm, link, optimizer, next_loss, bw.comm_ratio, tc.grad_clip, record)
            if algorithm.name == "dreamddp":
                profile = prepare_schedule(cfg, engine, comm, algorithm, optimizer, next_loss, run_dir, record)
        engine.set_algorithm(algorithm)
    if resumed is not None:
        checkpoint.restore(resumed, model, optimizer, lr_schedule, algorithm, data.train)
        del resumed
    if record is not None:
        record.set("link", link.describe())
        record.set("algorithm", algorithm.describe())
        record.set("units", [{"name": u.name, "numel": u.numel} for u in units])
        record.set("world_size", ctx.world_size)
        record.set("samples_per_epoch_per_worker", data.samples_per_epoch)
        if tc.resume:
            record.set("resumed_from", {"checkpoint": str(ckpt), "step": start})
        record.flush()
    run_meta = checkpoint.describe_run(cfg, ctx.world_size)

    # ---- training loop ----
    progress = Progress(tc.iterations - start, enabled=record is not None and tc.progress)
    for t in range(start, tc.iterations):
        batch = to_dev(next(data.train))
        engine.begin_iteration(t)
        t0 = time.perf_counter()
        loss = compute_loss(task, train_model, batch)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        engine.end_backward()
        engine.step(optimizer, tc.grad_clip)
        lr_schedule.step()
        stats = engine.after_step()
        row = {
            "iteration": t, "time": stats.end - stats.start, "forward": t1 - t0, "backward": t2 - t1,
            "wait": stats.wait, "bytes": stats.bytes, "wire_bytes": stats.wire_bytes, "loss": loss.item(),
            "lr": lr_schedule.get_last_lr()[0],
        }
        if stats.sampled and record is not None:
            row["timeline"] = {"unit_ready": stats.unit_ready, "collectives": stats.events}
        if record is not None:
            record.add_iteration(row)
            if t % max(1, tc.log_every) == 0:
                wandb.log(t, {k: v for k, v in row.items() if k != "timeline"})
        progress.update(row)

        last = t + 1 == tc.iterations
        if tc.divergence_every and algorithm.uses_engine and ((t + 1) % tc.divergence_every == 0 or last):
            div = divergence(engine.flat)
            if record is not None:
                record.add_divergence({"iteration": t, **div})
                wandb.log(t, {"divergence": div["mean"]})
        if (tc.eval_every and (t + 1) % tc.eval_every == 0) or last:
            engine.flush()
            metrics = _evaluate_replicas(task, model, data.eval, to_dev, ctx)
            if record is not None:
                record.add_eval({"iteration": t, **metrics})
                wandb.log(t, {f"eval/{k}": v for k, v in metrics.items()})
            progress.note(metrics)
        if tc.checkpoint_every and ((t + 1) % tc.checkpoint_every == 0 or last):
            engine.flush()
            state = checkpoint.capture(model, optimizer, lr_schedule, algorithm, data.train,
                                       setup_state(cfg, link, algorithm))
            saved = checkpoint.save(run_dir, t + 1, ctx.rank, state, run_meta, tc.checkpoint_keep)
            if record is not None:
                record.add_checkpoint({"iteration": t, "step": t + 1, "dir": os.path.relpath(saved, run_dir)})
    engine.close()
    progress.close()

    if record is not None:
        summary = summarise(record, cfg, ctx.world_size)
        if profile is not None:
            summary["predicted"] = predict(cfg, profile, algorithm, link, ctx.world_size)
        record.finish(summary)
        wandb.summary(summary)
        print(summary["text"], flush=True)


def _evaluate_replicas(task, model, batches, to_dev, ctx) -> dict:
    """Every replica evaluates itself on the same held-out batches; report the mean over replicas."""
    metrics = evaluate(task, model, [to_dev(b) for b in batches])
    keys = sorted(metrics)
    vec = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    if ctx.world_size > 1:
        dist.all_reduce(vec)
        vec /= ctx.world_size
    return dict(zip(keys, vec.tolist()))


def _mover(device: torch.device):
    if device.type == "cpu":
        return lambda b: b
    return lambda b: tuple(x.to(device, non_blocking=True) for x in b) if isinstance(b, (tuple, list)) else b.to(device)
