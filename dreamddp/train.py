"""The worker loop: one process = one worker, one :class:`Run` in four phases.

1. ``build``: process-group context in hand, the model (same seed everywhere,
   rank 0's values broadcast), this worker's data shard, the link and its
   communicator, the engine (holding the ``nosync`` algorithm for now), the
   optimizer and its learning-rate schedule;
2. ``set_up``: either the warm-up passes (the link calibrates, the algorithm
   prepares: DreamDDP profiles and schedules) or a checkpoint's saved set-up and
   state; then the algorithm is built in one step and handed to the engine;
3. ``loop``: the training iterations, with periodic evaluation, divergence and
   checkpoints;
4. ``finish``: the summary (and the simulator's prediction when a profile was
   measured) closes the run record.

Reports go through a recorder that is a no-op on ranks > 0 (dreamddp.recorder).
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from dreamddp import checkpoint, dist_env
from dreamddp.algorithms import ALGORITHMS
from dreamddp.algorithms.nosync import NoSync
from dreamddp.checks import at_least
from dreamddp.comm.communicator import Communicator
from dreamddp.comm.links import build_link
from dreamddp.data import DATASETS, build_data
from dreamddp.engine.divergence import divergence
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.passthrough import DDPEngine
from dreamddp.models import MODELS, build_model, model_units
from dreamddp.models.tasks import compute_loss, evaluate
from dreamddp.optim import build_lr_schedule, build_optimizer
from dreamddp.prediction import simulate_record
from dreamddp.recorder import NullRecorder, recorder_for
from dreamddp.summary import Progress
from dreamddp.warmup import Warmup


def check(train) -> None:
    """The trainer's rules on ``train.*`` (the optimizer's are in dreamddp.optim)."""
    for key in ("iterations", "batch_size", "log_every"):
        at_least(f"train.{key}", train[key], 1)
    for key in ("eval_every", "divergence_every", "checkpoint_every", "checkpoint_keep"):
        at_least(f"train.{key}", train[key], 0)


def run_worker(cfg: DictConfig, run_dir: str) -> None:
    ctx = dist_env.init_distributed(cfg)
    recorder = recorder_for(ctx.rank, cfg, run_dir)
    try:
        run = Run(cfg, ctx, run_dir, recorder)
        run.build()
        run.set_up()
        run.loop()
        run.finish()
    except BaseException as e:
        recorder.fail(f"{type(e).__name__}: {e}")
        raise
    finally:
        dist_env.shutdown()


class Run:
    def __init__(self, cfg: DictConfig, ctx, run_dir: str, recorder: NullRecorder):
        self.cfg, self.ctx, self.run_dir, self.recorder = cfg, ctx, run_dir, recorder
        self.algo_cls = ALGORITHMS.lookup(cfg.algo.name)
        self.task = MODELS[cfg.model.name].task
        self.start = 0  # first iteration to run (a checkpoint's step when resuming)
        self.warmup: Warmup | None = None

    # ---- 1. build -----------------------------------------------------------------
    def build(self) -> None:
        cfg, ctx, mc, dc, tc = self.cfg, self.ctx, self.cfg.model, self.cfg.data, self.cfg.train
        torch.set_num_threads(cfg.cluster.threads_per_worker)
        torch.manual_seed(cfg.seed)
        lm = self.task == "lm"
        num_classes = DATASETS[dc.name].num_classes
        self.model = build_model(
            mc.name, mc.size, num_classes=None if lm else num_classes,
            vocab_size=mc.vocab_size if lm else None, block_size=dc.block_size if lm else None,
        ).to(ctx.device)
        self.units = model_units(self.model)
        vocab = getattr(getattr(self.model, "config", None), "vocab_size", None)
        self.data = build_data(
            dc.name, task=self.task, rank=ctx.rank, world_size=ctx.world_size, seed=cfg.seed,
            batch_size=tc.batch_size, root=dc.root, block_size=dc.block_size, vocab_size=vocab,
            eval_fraction=dc.eval_fraction, eval_batches=dc.eval_batches, synthetic_size=dc.synthetic_size,
            num_classes=num_classes,
        )
        self.to_dev = _mover(ctx.device)
        self.link = build_link(cfg.bandwidth)
        self.comm = Communicator(link=self.link)
        if self.algo_cls.uses_engine:
            self.engine = PartialSyncEngine(self.model, self.units, self.comm, NoSync(cfg.algo),
                                            sample_every=max(1, cfg.algo.H))
            self.comm.broadcast(self.engine.flat.params, src=0)  # identical start, as DDP does
            self.train_model = self.model
        else:
            ids = [ctx.local_rank] if ctx.device.type == "cuda" else None
            self.train_model = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
            self.engine = DDPEngine(self.train_model, self.units)
        self.optimizer = build_optimizer(tc, self.model.parameters())
        self.lr_schedule = build_lr_schedule(tc, self.optimizer)

    # ---- 2. set up: warm-up passes, or a checkpoint ---------------------------------
    def set_up(self) -> None:
        cfg, rec = self.cfg, self.recorder
        resumed = None
        if cfg.train.resume:
            ckpt, self.start = checkpoint.check_resume(cfg, self.ctx.world_size)
            resumed = checkpoint.load(ckpt, self.ctx.rank, self.ctx.device)
            saved = resumed["setup"]  # the saved run's set-up, not a new measurement
            self.link.load_setup_state(saved["link"])
            setup = saved["algorithm"]
            rec.set("resumed_from", {"checkpoint": str(ckpt), "step": self.start})
        elif self.algo_cls.uses_engine:
            # Measured on the live job with no traffic of the algorithm's own; training state restored after.
            next_loss = lambda: compute_loss(self.task, self.model, self.to_dev(next(self.data.train)))  # noqa: E731
            self.warmup = Warmup(cfg, self.engine, self.comm, self.optimizer, next_loss, rec)
            if self.link.needs_calibration:
                rec.set("link_calibration", self.link.calibrate(self.warmup))
            setup = self.algo_cls.prepare(cfg.algo, self.warmup)
        else:
            setup = {}
        self.setup = setup
        self.algorithm = self.algo_cls.build(cfg.algo, setup)
        if self.algo_cls.uses_engine:
            self.engine.set_algorithm(self.algorithm)
        if resumed is not None:
            checkpoint.restore(resumed, self.model, self.optimizer, self.lr_schedule, self.algorithm, self.data.train)
        for key, value in setup.items():
            rec.set(key, value)
        rec.set("link", self.link.describe())
        rec.set("algorithm", self.algorithm.describe())
        rec.set("units", [{"name": u.name, "numel": u.numel} for u in self.units])
        rec.set("world_size", self.ctx.world_size)
        rec.set("samples_per_epoch_per_worker", self.data.samples_per_epoch)
        rec.flush()

    # ---- 3. the training loop -------------------------------------------------------
    def loop(self) -> None:
        cfg, tc, engine, rec = self.cfg, self.cfg.train, self.engine, self.recorder
        run_meta = checkpoint.describe_run(cfg, self.ctx.world_size)
        progress = Progress(tc.iterations - self.start, enabled=rec.active and tc.progress)
        for t in range(self.start, tc.iterations):
            batch = self.to_dev(next(self.data.train))
            engine.begin_iteration(t)
            t0 = time.perf_counter()
            loss = compute_loss(self.task, self.train_model, batch)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            engine.end_backward()
            engine.step(self.optimizer, tc.grad_clip)
            self.lr_schedule.step()
            stats = engine.after_step()
            row = {
                "iteration": t, "time": stats.end - stats.start, "forward": t1 - t0, "backward": t2 - t1,
                "wait": stats.wait, "bytes": stats.bytes, "wire_bytes": stats.wire_bytes, "loss": loss.item(),
                "lr": self.lr_schedule.get_last_lr()[0],
            }
            if stats.sampled:
                row["timeline"] = {"unit_ready": stats.unit_ready, "collectives": stats.events}
            rec.iteration(row)
            progress.update(row)

            last = t + 1 == tc.iterations
            if tc.divergence_every and self.algo_cls.uses_engine and ((t + 1) % tc.divergence_every == 0 or last):
                rec.divergence(t, divergence(engine.flat))
            if (tc.eval_every and (t + 1) % tc.eval_every == 0) or last:
                engine.flush()
                metrics = self._evaluate_replicas()
                rec.evaluation(t, metrics)
                progress.note(metrics)
            if tc.checkpoint_every and ((t + 1) % tc.checkpoint_every == 0 or last):
                engine.flush()
                setup = {"link": self.link.setup_state(), "algorithm": self.setup}
                state = checkpoint.capture(self.model, self.optimizer, self.lr_schedule, self.algorithm,
                                           self.data.train, setup)
                saved = checkpoint.save(self.run_dir, t + 1, self.ctx.rank, state, run_meta, tc.checkpoint_keep)
                rec.checkpoint({"iteration": t, "step": t + 1, "dir": os.path.relpath(saved, self.run_dir)})
        engine.close()
        progress.close()

    # ---- 4. finish --------------------------------------------------------------------
    def finish(self) -> None:
        profile = self.warmup.profiled if self.warmup is not None else None
        predict = None
        if profile is not None:
            predict = lambda: self._predict(profile)  # noqa: E731
        self.recorder.close(self.cfg, self.ctx.world_size, predict)

    def _predict(self, profile) -> dict:
        """The simulator's mean iteration time and exposed wait for this run's algorithm and plan."""
        link = self.link.model()
        res = simulate_record(profile, OmegaConf.to_container(self.cfg, resolve=True), world=self.ctx.world_size,
                              link=link, groups=getattr(self.algorithm, "groups", None))
        return {"mean_iteration_time": res.mean_iter, "mean_wait": res.mean_wait,
                "link": "modelled" if link else "measured"}

    def _evaluate_replicas(self) -> dict:
        """Every replica evaluates itself on the same held-out batches; report the mean over replicas."""
        metrics = evaluate(self.task, self.model, [self.to_dev(b) for b in self.data.eval])
        keys = sorted(metrics)
        vec = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
        if self.ctx.world_size > 1:
            dist.all_reduce(vec)
            vec /= self.ctx.world_size
        return dict(zip(keys, vec.tolist()))


def _mover(device: torch.device):
    if device.type == "cpu":
        return lambda b: b
    return lambda b: tuple(x.to(device, non_blocking=True) for x in b) if isinstance(b, (tuple, list)) else b.to(device)
