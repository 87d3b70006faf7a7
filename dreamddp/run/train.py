"""The worker loop: one process = one worker, one :class:`Run` in four phases.

1. ``build``: process-group context in hand, the model (same seed everywhere,
   rank 0's values broadcast), this worker's data shard, the link and its
   communicator, the engine (holding the ``nosync`` algorithm for now), the
   optimizer and its learning-rate schedule;
2. ``set_up``: either the warm-up passes (the link calibrates, the algorithm
   prepares: DreamDDP profiles and schedules) or a checkpoint's saved set-up and
   state; then the algorithm is built in one step and handed to the engine;
3. ``train``: the training iterations, with periodic evaluation, divergence and
   checkpoints (or ``steps``: the same, one iteration per ``next``);
4. ``finish``: the summary (and the simulator's prediction when a profile was
   measured) closes the run record.

Reports go through a recorder that is a no-op on ranks > 0 (dreamddp.run.recorder).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from dreamddp import faults, speed
from dreamddp.run import checkpoint, dist_env, failures, preempt
from dreamddp.algorithms import ALGORITHMS
from dreamddp.checks import at_least, choice
from dreamddp.comm.communicator import Communicator
from dreamddp.comm.links import build_link
from dreamddp.data import build_data, data_args
from dreamddp.engine.mesh import rank_bytes, replicate_group, shard_for_run
from dreamddp.engine.units import reorder_units
from dreamddp.models import MODELS, build_model, model_args, model_units, summarize, summary_line
from dreamddp.models.tasks import compute_loss, evaluate
from dreamddp.optim import build_lr_schedule, build_optimizer
from dreamddp.comm.gather import gather_by_rank
from dreamddp.prediction import simulate_record, skew_of
from dreamddp.run.recorder import NullRecorder, recorder_for
from dreamddp.run.summary import Progress, compute_summary, warmup_cut
from dreamddp.warmup import Warmup, codec_host

MATMUL_PRECISIONS = ("highest", "high", "medium")  # torch.set_float32_matmul_precision
PREDICTED_WINDOWS = 20  # windows the in-run prediction averages over (the skew is sampled)


def check(train) -> None:
    """The trainer's rules on ``train.*`` (the optimizer's are in dreamddp.optim)."""
    for key in ("iterations", "batch_size", "log_every"):
        at_least(f"train.{key}", train[key], 1)
    for key in ("eval_every", "divergence_every", "checkpoint_every", "checkpoint_keep"):
        at_least(f"train.{key}", train[key], 0)
    choice("train.matmul_precision", train.matmul_precision, MATMUL_PRECISIONS)


def run_worker(cfg: DictConfig, run_dir: str) -> None:
    """One worker's run, and how it ends when something goes wrong.

    A restarted worker (torchrun restart, requeued SLURM job) continues from the
    newest checkpoint of its run directory.  An exception is put on file with this
    rank first (dreamddp.run.failures), then the group is torn down without a barrier,
    since the peers are mid-collective or gone.  A checkpoint-and-stop request
    (dreamddp.run.preempt) ends the run "preempted".  DREAMDDP_FAULT arms test faults.
    """
    rank, recorder, clean = dist_env.worker_env().rank, NullRecorder(), False
    try:
        found = checkpoint.auto_resume(cfg, run_dir)  # a restarted worker: its run's newest checkpoint
        restarted = found is not None
        if cfg.train.resume or restarted:  # the exact step, for the record too
            cfg.train.resume = str(found or checkpoint.find(cfg.train.resume))
        ctx = dist_env.init_distributed(cfg)
        recorder = recorder_for(ctx.rank, cfg, run_dir)
        preempt.install(cfg.cluster.preemptible, run_dir, ctx.rank, cfg.cluster.timeout_s)
        run = Run(cfg, ctx, run_dir, recorder, restarted)
        run.build()
        faults.arm_forward(run.model, ctx.rank)
        run.set_up()
        faults.arm_iteration(run.model, ctx.rank, run.start)
        run.train()
        faults.at_finish(ctx.rank)
        run.finish()
        clean = True
    except preempt.Preempted as stop:
        recorder.preempted(str(stop))  # the record says "preempted", not "failed"; W&B a preempting run
        if recorder.active:
            preempt.consume(run_dir)
        clean = True
    except BaseException as e:
        failures.report(run_dir, rank, e)
        recorder.fail(f"rank {rank}: {failures.one_line(e)}")
        raise
    finally:
        dist_env.shutdown(clean)


class Run:
    def __init__(self, cfg: DictConfig, ctx, run_dir: str, recorder: NullRecorder, restarted: bool = False):
        self.cfg, self.ctx, self.run_dir, self.recorder = cfg, ctx, run_dir, recorder
        # A restarted worker continuing its own run: a checkpoint at train.iterations (the run
        # failed after its last one, in its summary) leaves only the finish to do
        self.restarted = restarted
        self.algo_cls = ALGORITHMS.lookup(cfg.algo.name)
        self.task = MODELS[cfg.model.name].task
        self.start = 0  # first iteration to run (a checkpoint's step when resuming)
        self._started = False  # the training iterations began (they run once)
        self.profiled = None  # the start-up profile the prediction is made from (Profile)
        self.prediction: dict | None = None  # the simulator's, made before training (rank 0)
        self.codec_host = None  # (elements, launch s, completion s) of the algorithm's codec, timed at start-up
        self.compute: list[float] = []  # this rank's compute seconds (iteration less exposed wait)
        self.speeds = speed.Speeds.from_config(cfg.cluster)  # unequal workers: this rank's speed per iteration

    # ---- 1. build -----------------------------------------------------------------
    def build(self) -> None:
        cfg, ctx, mc, tc = self.cfg, self.ctx, self.cfg.model, self.cfg.train
        torch.set_num_threads(cfg.cluster.threads_per_worker)
        torch.manual_seed(cfg.seed)
        torch.set_float32_matmul_precision(tc.matmul_precision)
        self.model = build_model(**model_args(cfg)).to(ctx.device)
        if self.recorder.active:  # rank 0: the model's size in the record, and one line at start
            model_summary = summarize(mc.name, mc.size, self.model)
            self.recorder.set("model", model_summary)
            print(summary_line(model_summary), flush=True)
        vocab = getattr(getattr(self.model, "config", None), "vocab_size", None)  # LMs: token ids remapped into it
        self.data = build_data(**data_args(cfg, task=self.task, rank=ctx.rank, world_size=ctx.world_size,
                                           vocab_size=vocab))
        self.to_dev = _mover(ctx.device)
        # Units in the order their gradients become ready, measured on a held-out batch;
        # every rank adopts rank 0's order, so plans and schedules agree.
        sample = self.to_dev(self.data.eval[0])
        self.units = model_units(self.model, lambda: compute_loss(self.task, self.model, sample))
        if ctx.world_size > 1:
            names = [[u.name for u in self.units]]
            dist.broadcast_object_list(names, src=0)
            self.units = reorder_units(self.units, names[0])
        # replicas x shards (cluster.shards > 1): FSDP2 inside each replica, partial sync across them
        self.mesh, self.units = shard_for_run(cfg.cluster, ctx.device, self.model, self.units)
        self.link = build_link(cfg.bandwidth)
        # A waiting worker must not lend its core where nothing else stops it (no CPU quota).
        contended = bool(ctx.host.get("oversubscribed")) and not ctx.host.get("cpu_quota")
        late = self.algo_cls.merges_late(cfg.algo)
        self.comm = Communicator(replicate_group(self.mesh), link=self.link, carrier=self.link.carrier(cfg.bandwidth.carrier, ctx.device, late),
                                 hold_core=self.link.hold_core(cfg.bandwidth.hold_core, ctx.device, contended))
        # The algorithm decides what runs the model: the partial-sync engine, or DDP's own wrapper.
        self.engine, self.train_model = self.algo_cls.make_engine(self.model, self.units, self.comm, ctx, cfg=cfg.algo,
                                                                  sample_every=max(1, cfg.algo.H),
                                                                  grad_clip=cfg.train.grad_clip)
        self.optimizer = build_optimizer(tc, self.model.parameters(), self.algo_cls.optimizer_name(cfg.algo, tc))
        self.lr_schedule = build_lr_schedule(tc, self.optimizer)

    # ---- 2. set up: warm-up passes, or a checkpoint ---------------------------------
    def set_up(self) -> None:
        cfg, rec = self.cfg, self.recorder
        resumed = None
        if cfg.train.resume:
            ckpt, self.start = checkpoint.check_resume(cfg, self.ctx.world_size, finished=self.restarted)
            resumed = checkpoint.load(ckpt, self.ctx.rank, self.ctx.device)
            saved = resumed["setup"]  # the saved run's set-up, not a new measurement
            self.link.load_setup_state(saved["link"])
            setup = saved["algorithm"]
            self.codec_host = saved.get("codec_host")
            rec.set("resumed_from", {"checkpoint": str(ckpt), "step": self.start})
            measured_in = checkpoint.run_dir_of(ckpt)
            self.profiled = checkpoint.saved_profile(measured_in)  # what the continued run's prediction used
            if self.profiled is not None and measured_in != Path(self.run_dir).resolve():
                rec.save_profile(self.profiled, measured_in=str(measured_in))  # a new run dir: beside its record too
        else:
            # Measured on the live job with no traffic of the algorithm's own; training state restored
            # after, and training starts on the batches and random draws it would have had without it
            # (so every algorithm of one seed sees one data order, however many passes it warms up).
            data_at, rng_at = self.data.train.state_dict(), checkpoint.RNGState().state_dict()
            next_loss = lambda: compute_loss(self.task, self.model, self.to_dev(next(self.data.train)))  # noqa: E731
            warmup = Warmup(cfg, self.engine, self.comm, self.optimizer, next_loss, rec)
            if self.link.needs_calibration:
                rec.set("link_calibration", self.link.calibrate(warmup))
            setup = self.algo_cls.prepare(cfg.algo, warmup)
            # an algorithm that profiled for its plan predicts from that profile; the others
            # profile a few passes for it (the reference runs off the engine cannot be profiled)
            if warmup.profiled is None and cfg.warmup.predict_iterations and self.algo_cls.on_engine:
                # on a paced link the link's model gives each unit's all-reduce: not timed here
                warmup.profile(cfg.warmup.predict_iterations, comm=not self.link.paced)
            self.profiled = warmup.profiled
            self.data.train.load_state_dict(data_at)
            checkpoint.RNGState().load_state_dict(rng_at)
        self.algorithm = self.algo_cls.build(cfg.algo, setup)
        self.engine.set_algorithm(self.algorithm)
        if resumed is None and self.algo_cls.on_engine:  # its codec's host work, for the prediction
            self.codec_host = codec_host(self.algorithm.sync, self.comm)
        if self.codec_host:
            rec.set("codec_host_s", self.codec_host)
        self.checkpointed = {  # what a checkpoint holds, by name; each object saves and loads itself
            **dict(zip(("model", "optimizer"), checkpoint.sharded(self.model, self.optimizer))),
            "lr_schedule": self.lr_schedule,
            "algorithm": self.algorithm, "data": self.data.train, "rng": checkpoint.RNGState(),
            "setup": checkpoint.SetUp(self.link, setup, self.codec_host),
        }
        if resumed is not None:
            checkpoint.restore(resumed, self.checkpointed)
        for key, value in setup.items():
            rec.set(key, value)
        rec.set("link", {**self.link.describe(), "carrier": self.comm.carrier, "hold_core": self.comm.hold_core})
        rec.set("optimizer", type(self.optimizer).__name__)
        rec.set("algorithm", self.algorithm.describe())
        if self.profiled is not None and rec.active:  # before training: a prediction, not a fit
            self.prediction = self._predict(self.profiled)
            print(f"predicted: {1e3 * self.prediction['mean_iteration_time']:.1f} ms per iteration, exposed wait "
                  f"{1e3 * self.prediction['mean_wait']:.1f} ms (the simulator on the start-up profile)", flush=True)
        rec.set("units", [{"name": u.name, "numel": u.numel} for u in self.units])
        rec.set("param_bytes_per_rank", rank_bytes(self.model)["param_bytes"])  # rank 0's (its shard, S > 1)
        if not self.speeds.uniform:
            rec.set("speeds", self.speeds.describe())
        rec.set("world_size", self.ctx.world_size)
        rec.set("nnodes", self.ctx.nnodes)
        rec.set("ranks", list(self.ctx.ranks))  # per rank: local_rank, node, hostname (dist_env.gather_ranks)
        rec.set("host", self.ctx.host)  # local workers, cores, pinning, CPU quota (dist_env.share_host)
        rec.set("samples_per_epoch_per_worker", self.data.samples_per_epoch)
        rec.flush()

    # ---- 3. the training loop -------------------------------------------------------
    def train(self) -> None:
        """All of ``train.iterations`` (what dreamddp-run does between set_up and finish)."""
        for _ in self._iterations():
            pass

    def steps(self) -> Iterator[int]:
        """The same iterations one at a time: a generator that yields each iteration's number
        once it is done (its evaluation and checkpoint included), for a caller that does
        something between iterations, such as train several runs in turn.  The link's clock
        stands still while the generator is suspended (before the first ``next`` too), so
        what the caller does meanwhile never hides this run's transfers
        (Communicator.pause).  The last iteration is yielded after the run has landed what
        was in flight, so a caller may stop there and ``finish``."""
        iterations = self._iterations()
        self.comm.pause()  # a fresh generator is suspended too
        return self._clocked(iterations)

    def _clocked(self, iterations: Iterator[int]) -> Iterator[int]:
        self.comm.resume()
        for t in iterations:
            self.comm.pause()
            yield t
            self.comm.resume()

    def _iterations(self) -> Iterator[int]:
        if self._started:  # the record, the data and the optimizer would run twice
            raise RuntimeError("Run: the training iterations were already started")
        self._started = True
        return self._loop()

    def _loop(self) -> Iterator[int]:
        cfg, tc, engine, rec = self.cfg, self.cfg.train, self.engine, self.recorder
        run_meta = checkpoint.describe_run(cfg, self.ctx.world_size)
        progress = Progress(tc.iterations - self.start, enabled=rec.active and tc.progress)
        for t in range(self.start, tc.iterations):
            if self.algorithm.window is None or self.algorithm.window.steps_at(t):
                row = self._iteration(t)
                rec.iteration(row)
                progress.update(row)
                # every rank: its skew, gathered at finish; less the wait that made it slow, which the
                # simulator adds from cluster.worker_speed itself
                self.compute.append(row["time"] - row["wait"] - row.get("stretched", 0.0))
            else:  # a timed window closed early: no batch, no step; the schedule keeps to the iteration
                self.lr_schedule.step()
                progress.skip()

            last = t + 1 == tc.iterations
            stop = not last and preempt.requested()  # a checkpoint-and-stop request, agreed by all ranks
            if last:  # what would land after the end (a late outer step, a late merge) lands before the last evaluation
                engine.land_all()
            if tc.divergence_every and ((t + 1) % tc.divergence_every == 0 or last):
                engine.flush()  # averages still in flight (overlap_forward's) land first, as for evaluation
                div = engine.divergence()  # None where the engine keeps no flat buffers (DDP, plain)
                if div is not None:
                    rec.divergence(t, div)
            if (tc.eval_every and (t + 1) % tc.eval_every == 0) or last:
                engine.flush()
                metrics = self._evaluate_replicas()
                rec.evaluation(t, metrics)
                progress.note(metrics)
            if (tc.checkpoint_every and ((t + 1) % tc.checkpoint_every == 0 or last)) or stop:
                engine.flush()
                state = checkpoint.capture(self.checkpointed)
                saved = checkpoint.save(self.run_dir, t + 1, self.ctx.rank, state, run_meta, tc.checkpoint_keep)
                rec.checkpoint({"iteration": t, "step": t + 1, "dir": os.path.relpath(saved, self.run_dir)})
                if stop:
                    raise preempt.Preempted(t + 1)
            if last:
                engine.close()
                progress.close()
            yield t
        if self.start >= tc.iterations:  # a restarted worker with only the finish left: closed all the same
            engine.close()
            progress.close()

    def _iteration(self, t: int) -> dict:
        """One training iteration through the engine: its row of the record.  A worker slower
        than full speed (cluster.worker_speed, cluster.slow_spell) waits after its forward and
        after its backward, in proportion to each (dreamddp/speed.py): in the passes' times."""
        engine = self.engine
        batch = self.to_dev(next(self.data.train))
        engine.begin_iteration(t)
        slow = self.speeds.of(self.ctx.rank, t)
        stretched = 0.0
        t0 = engine.clock()
        loss = compute_loss(self.task, self.train_model, batch)
        t1 = engine.clock()
        if slow < 1:
            stretched += speed.stretch(t1 - t0, slow)
            t1 = engine.clock()
        loss.backward()
        t2 = engine.clock()
        if slow < 1:
            stretched += speed.stretch(t2 - t1, slow)
            t2 = engine.clock()
        engine.end_backward()
        engine.step(self.optimizer)
        self.lr_schedule.step()
        stats = engine.after_step()
        row = {
            "iteration": t, "time": stats.end - stats.start, "forward": t1 - t0, "backward": t2 - t1,
            "wait": stats.wait, "bytes": stats.bytes, "wire_bytes": stats.wire_bytes, "loss": loss.item(),
            "lr": self.lr_schedule.get_last_lr()[0],
            # the engine's host work on its ops, waits excluded (engine/stats.py)
            "ops": len(stats.ops), "launch_host": stats.launch_host,
            "completed": stats.completed, "complete_host": stats.complete_host,
            "forward_steps": stats.forward_steps,
            **self.algorithm.iteration_record(),
        }
        if slow < 1:  # of forward and backward, the seconds waited to be that slow
            row.update(speed=slow, stretched=stretched)
        if stats.grad_norm is not None:
            row["grad_norm"] = float(stats.grad_norm)
        if stats.sampled:
            row["timeline"] = {"unit_ready": stats.unit_ready, "collectives": stats.events}
        return row

    # ---- 4. finish --------------------------------------------------------------------
    def finish(self) -> None:
        timed = self.compute[warmup_cut(len(self.compute)):]
        if timed:  # every rank takes part (none has any after a restart that only finishes)
            self.recorder.set("compute_by_rank", compute_summary(gather_by_rank(self.comm, timed)))
        predict = None if self.prediction is None else (lambda: self.prediction)
        if predict is None and not self.algo_cls.on_engine:  # say why, rather than leave it out
            predict = lambda: {"reason": f"algo={self.cfg.algo.name} runs off the engine: no start-up "  # noqa: E731
                                         "profile to predict from"}
        self.recorder.close(self.cfg, self.ctx.world_size, predict)

    def _predict(self, profile) -> dict:
        """The simulator on this run's start-up profile and its plan: mean iteration time and
        exposed wait, and the expected time of each position of the window (the ranks' skew
        sampled from their start-up passes, over many windows; the real transfer the deferred
        carrier exposes, which the link probed at start-up only under that carrier)."""
        link = self.link.model()
        plan = self.algorithm.describe()
        H = int(self.cfg.algo.H)
        res = simulate_record(profile, OmegaConf.to_container(self.cfg, resolve=True), world=self.comm.world_size,
                              link=link, plan=plan, skew=skew_of(profile.meta.get("compute_by_rank"), profile),
                              carrier=self.link.real_transfer, carrier_at_step=self.comm.carrier == "step",
                              iterations=PREDICTED_WINDOWS * H, codec_host=self.codec_host)
        per_position = [statistics.fmean(it for it, _ in res.per_iter[p::H]) for p in range(H)]
        return {"mean_iteration_time": res.mean_iter, "mean_wait": res.mean_wait, "per_position": per_position,
                "link": "modelled" if link else "measured", "skew": "start-up passes"}

    def _evaluate_replicas(self) -> dict:
        """Every replica evaluates on the same held-out batches (the parameters its algorithm
        says evaluation sees: the replica, or Streaming DiLoCo's global model); the mean over
        replicas is reported."""
        with self.algorithm.evaluation(self.engine):
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
