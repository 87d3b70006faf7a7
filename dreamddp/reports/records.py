"""The typed reader of run records and benchmark folders: the one place a report reads a record's keys.

Bytes: a report shows *wire bytes per worker per iteration* (``Record.wire_per_iteration``), what
the link, simulator and engine charge; a row's ``bytes`` is the collective's flat tensor (the
payload): an all-gather's holds every worker's part.  Records older than ``wire_bytes`` count bytes.
Provenance: reports/versions.py refuses records of different code in one report unless mixing.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from dreamddp.algorithms import ALGORITHMS
from dreamddp.prediction import record_carrier, record_link
from dreamddp.reports.target import SMOOTH
from dreamddp.run.summary import warmup_cut


# ---- naming: the one algorithm order and the one variant namer every report uses ----

def _display(name: str | None):
    cls = ALGORITHMS.get(name) if name else None
    return None if cls is None else cls.display


def variant(algo: dict) -> str:
    """A run's algorithm as a user types it (``config.algo`` -> dreamddp+overlap, a recipe's name)."""
    cls = ALGORITHMS.get(algo["name"])
    return cls.variant(algo) if cls is not None else algo["name"]


def order(label: str, algo: str | None = None) -> tuple:
    """Sort key of a row label: its algorithm's display order (the part before "+", "@" or " ",
    else the record's ``algo`` name), then the label; unknown ones last."""
    display = _display(re.split(r"[+@ ]", label, maxsplit=1)[0]) or _display(algo)
    return (display.order if display is not None else 10**6, label)


def ordered(labels) -> list[str]:
    return sorted(dict.fromkeys(labels), key=order)


# ---- the typed record ----

@dataclass(frozen=True)
class Provenance:
    git_sha: str | None
    dirty: bool | None = None
    source: str | None = None  # digest of the package's source files

    @classmethod
    def of(cls, raw: dict) -> "Provenance":
        p = raw.get("provenance") or {}  # old records carry git_sha alone
        return cls(p.get("git_sha", raw.get("git_sha")), p.get("dirty"), p.get("source"))

    def name(self) -> str:
        sha = (self.git_sha or "unknown")[:10]
        return sha + ("+dirty" if self.dirty else "") + (f" (source {self.source[:8]})" if self.source else "")


@dataclass(frozen=True)
class Row:
    """One recorded iteration (seconds and bytes as the trainer wrote them)."""
    iteration: int
    time: float
    wait: float = 0.0
    forward: float = 0.0
    backward: float = 0.0
    loss: float | None = None
    bytes: float = 0.0  # payload: the collectives' flat tensors
    wire_bytes: float | None = None  # what this worker sent (None: an old record)
    elapsed: float | None = None  # compact records: training seconds up to this row
    collectives: tuple = ()  # sampled rows: (complete, deadline, blocked) per collective, seconds in the iteration
    forward_steps: float | None = None  # optimizer steps applied in forward (SyncOp.steps); None in older records
    # the engine's host work: (launch seconds, ops launched, complete seconds, ops completed); None in older records
    host: tuple | None = None

    @property
    def wire(self) -> float:
        return self.bytes if self.wire_bytes is None else self.wire_bytes

    @property
    def rest(self) -> float:
        """The iteration less its waits, forward and backward: the step and the engine's books."""
        return self.time - self.wait - self.forward - self.backward

    @classmethod
    def of(cls, r: dict) -> "Row":
        events = tuple((e.get("complete"), e.get("deadline"), e.get("blocked", 0.0))
                       for e in (r.get("timeline") or {}).get("collectives", []))
        host = (r["launch_host"], r["ops"], r["complete_host"], r["completed"]) if "launch_host" in r else None
        return cls(r.get("iteration", 0), r.get("time", 0.0), r.get("wait", 0.0), r.get("forward", 0.0),
                   r.get("backward", 0.0), r.get("loss"), r.get("bytes", 0), r.get("wire_bytes"), r.get("elapsed"),
                   events, r.get("forward_steps"), host)


@dataclass(frozen=True)
class Eval:
    """One evaluation: its iteration, the training seconds before it (compact records) and its metrics."""
    iteration: int
    elapsed: float | None
    values: dict  # metric -> value (loss, accuracy, perplexity)

    def get(self, metric: str):
        return self.values.get(metric)

    @classmethod
    def of(cls, e: dict) -> "Eval":
        return cls(e.get("iteration", 0), e.get("elapsed"),
                   {k: v for k, v in e.items() if k not in ("iteration", "elapsed")})


@dataclass(frozen=True)
class Divergence:
    """How far the workers' parameters drifted apart at one iteration: the mean and per unit."""
    iteration: int
    mean: float
    per_unit: list

    @classmethod
    def of(cls, d: dict) -> "Divergence":
        per_unit = d.get("per_unit") or {}
        return cls(d.get("iteration", 0), d.get("mean"),
                   list(per_unit.values()) if isinstance(per_unit, dict) else list(per_unit))


@dataclass(frozen=True)
class Host:
    """How a CPU run's workers shared the host (dreamddp/run/dist_env.py); None where not recorded."""
    local_workers: int | None = None
    cores: int | None = None
    cpu_quota: float | None = None  # the cores the compute threads were capped at
    cpu_quota_note: str | None = None  # why there was no quota
    pinned: list | None = None  # the cores the workers were pinned to

    @classmethod
    def of(cls, h: dict) -> "Host":
        return cls(h.get("local_workers"), h.get("cores"), h.get("cpu_quota"), h.get("cpu_quota_note"), h.get("pinned"))


@dataclass(frozen=True)
class RankCompute:
    """One rank's compute seconds per iteration in a run: its quantiles, and the series where kept."""
    quantiles: list
    series: list | None = None


@dataclass
class Record:
    """A run record, typed: the one place a report reads a record's keys."""
    raw: dict = field(repr=False)  # as written
    path: str | None = None  # the run's folder (or compact record file)
    label: str = ""

    @classmethod
    def of(cls, raw: dict, path: str | None = None, label: str | None = None) -> "Record":
        return cls(raw, path, label or variant((raw.get("config") or {}).get("algo") or {"name": "?"}))

    config = property(lambda self: self.raw.get("config") or {})
    summary = property(lambda self: self.raw.get("summary") or {})
    extra = property(lambda self: self.raw.get("extra") or {})
    options = property(lambda self: dict(self.config.get("algo") or {"name": "?"}))  # what makes the run a variant
    algo = property(lambda self: self.options.get("name", "?"))
    model = property(lambda self: "/".join(str((self.config.get("model") or {}).get(k)) for k in ("name", "size")))
    # the model as the run's summary names it (a card's block), else ``model``
    shown_model = property(lambda self: self.summary.get("model", self.model))
    data = property(lambda self: (self.config.get("data") or {}).get("name", "?"))
    bandwidth = property(lambda self: self.config.get("bandwidth") or {})
    # the link the run asked for: its kind, rate and comm/backward ratio (None where not set)
    bandwidth_backend = property(lambda self: self.bandwidth.get("backend"))
    bandwidth_gbps = property(lambda self: self.bandwidth.get("gbps"))
    comm_ratio = property(lambda self: self.bandwidth.get("comm_ratio"))
    world = property(lambda self: int(self.summary.get("workers") or self.extra.get("world_size") or 0))
    # ranks per replica (FSDP2 inside it), and the replicas partial sync runs across (its ring's world)
    shards = property(lambda self: int((self.config.get("cluster") or {}).get("shards") or 1))
    replicas = property(lambda self: self.world // self.shards)
    device = property(lambda self: (self.config.get("cluster") or {}).get("device", "cpu"))
    hardware = property(lambda self: self.raw.get("hardware") or {})
    gpus = property(lambda self: self.hardware.get("gpus"))
    cores = property(lambda self: self.hardware.get("cores"))  # the machine's, not the run's share (``host``)
    host = property(lambda self: Host.of(self.extra.get("host") or {}))
    matmul_precision = property(lambda self: (self.config.get("train") or {}).get("matmul_precision"))
    # this rank's parameter bytes (its local shards when sharded); None in records before the mesh
    param_bytes = property(lambda self: self.extra.get("param_bytes_per_rank"))
    parameters = property(lambda self: (self.extra.get("model") or {}).get("parameters"))
    edge_share = property(lambda self: (self.extra.get("model") or {}).get("edge_share"))  # bytes in embeddings/head
    status = property(lambda self: self.raw.get("status", "?"))
    provenance = property(lambda self: Provenance.of(self.raw))
    iterations = cached_property(lambda self: [Row.of(r) for r in self.raw.get("iterations", [])])
    evaluation = cached_property(lambda self: [Eval.of(e) for e in self.raw.get("evals") or []])
    divergence = cached_property(lambda self: [Divergence.of(d) for d in self.raw.get("divergence") or []])
    memory = property(lambda self: self.extra.get("memory"))
    profile = property(lambda self: self.extra.get("profile"))
    profile_data = property(lambda self: self.extra.get("profile_data"))  # a compact record's profile files
    prediction = property(lambda self: self.summary.get("predicted"))  # the run's own a-priori prediction
    start_time = property(lambda self: self.raw.get("start_time"))
    end_time = property(lambda self: self.raw.get("end_time"))
    variant = property(lambda self: variant(self.options))
    name = property(lambda self: self.raw.get("name") or self.label)
    study = property(lambda self: self.raw.get("study", ""))  # a compact record's (compact.study_of)
    source = property(lambda self: self.raw.get("source"))  # a compact record's: the run's folder
    scale = property(lambda self: self.raw.get("scale", ""))
    seed = property(lambda self: self.config.get("seed"))
    # what a speedup pairs runs by: the seed, inside one benchmark repetition (its rep folder; a
    # benchmark's repetitions may share a seed)
    pair_key = property(lambda self: (self.seed, str(Path(self.path).parent) if self.path else None))
    batch_size = property(lambda self: (self.config.get("train") or {}).get("batch_size"))
    link = property(lambda self: self.extra.get("link") or {})
    link_backend = property(lambda self: self.link.get("backend", "ideal"))
    link_gbps = property(lambda self: self.link.get("gbps"))
    alpha_ms = property(lambda self: self.link.get("alpha_ms"))
    carrier = property(lambda self: self.link.get("carrier"))
    hold_core = property(lambda self: self.link.get("hold_core", False))
    # whether the link paced collectives on its own clock (the emulated one; tc's kernel shapes them)
    link_paced = property(lambda self: self.link.get("paced"))
    paced = property(lambda self: self.link_backend != "ideal")
    n_iterations = property(lambda self: self.summary.get("iterations"))
    n_timed = property(lambda self: self.summary.get("timed_iterations"))
    mean_iteration = property(lambda self: self.summary.get("mean_iteration_time"))
    mean_wait = property(lambda self: self.summary.get("mean_wait"))
    mean_backward = property(lambda self: self.summary.get("mean_backward"))
    # the run's own a-priori mean iteration and wait (made before it trained), None if it made none
    predicted_mean = property(lambda self: (self.prediction or {}).get("mean_iteration_time"))
    predicted_wait = property(lambda self: (self.prediction or {}).get("mean_wait"))
    peak_bytes = property(lambda self: (self.memory or {}).get("peak_bytes"))
    memory_note = property(lambda self: (self.memory or {}).get("note"))
    plan = property(lambda self: self.extra.get("algorithm"))  # the plan the run's algorithm described
    # a delayed-merge plan's late collectives per window position (None without a delay)
    delayed = property(lambda self: (self.plan or {}).get("delayed"))
    units = property(lambda self: [(u["name"], u["numel"]) for u in self.extra.get("units", [])])  # backward order
    # every rank's compute per iteration in the run: [{quantiles, series (newer records)}] per rank
    compute_by_rank = property(lambda self: [RankCompute(r.get("quantiles") or [], r.get("series"))
                                             for r in self.extra.get("compute_by_rank") or []])

    def option(self, key: str, default=None):
        """One of the run's algorithm options as recorded (records older than an option lack it: ``default``)."""
        return self.options.get(key, default)

    def warmup(self) -> list[Row]:
        """The rows before the warm-up cut (dreamddp/run/summary.py), which the summary leaves out."""
        return self.iterations[:warmup_cut(len(self.iterations))]

    def startup_compute(self) -> float | None:
        """Forward, backward and step seconds of the run's start-up profile (None without one)."""
        return sum(self.profile.get(k, 0.0) for k in ("forward_total", "backward_total", "step_time")) \
            if self.profile else None

    def startup_whole_step(self) -> bool:
        """Whether the start-up profile timed the optimizer step alone (the rest of the step apart)."""
        return (self.profile or {}).get("optimizer_time") is not None

    def link_model(self, gbps: float | None = None):
        """The modelled link the record describes (dreamddp/prediction.record_link), at ``gbps``."""
        return record_link(self.raw, gbps)

    def real_transfer(self):
        """The real transfer the run's deferred carrier exposed (dreamddp/prediction.record_carrier)."""
        return record_carrier(self.raw)

    def without_kind_probes(self) -> "Record | None":
        """This record as if its start-up had probed the all-reduce alone (the other collectives'
        transfers then scaled from it): a counterfactual for the analysis; None where it probed no other."""
        if not self.link.get("real_transfer_kinds_ms"):
            return None
        link = {k: v for k, v in self.link.items() if k != "real_transfer_kinds_ms"}
        return Record({**self.raw, "extra": {**self.extra, "link": link}}, self.path, self.label)

    def job_chunk(self) -> int | None:
        """The interleaved benchmark job's chunk (its spec.json's; 0: one H-window); None outside such a job."""
        spec = Path(self.path).parent / "spec.json" if self.path else None
        if spec is None or not spec.is_file():
            return None
        return int(json.loads(spec.read_text()).get("chunk") or 0)

    @property
    def H(self) -> int | None:
        display = _display(self.algo)
        return int(self.options["H"]) if display and display.periodic and self.options.get("H") is not None else None

    def epoch(self, iteration: int) -> float:
        """Epochs of this worker's shard done after ``iteration`` (each worker walks its own shard)."""
        per_worker = self.extra.get("samples_per_epoch_per_worker")
        if not per_worker:
            raise ValueError(f"run {self.name}: no samples_per_epoch_per_worker in its record")
        return (iteration + 1) * self.batch_size / per_worker

    def calibration(self) -> dict:
        """The link calibration (gbps, model_bytes, ratio, backward_s) of the job this benchmark segment ran in."""
        return json.loads((Path(self.path).parent / "calibration.json").read_text())

    def timed(self) -> list[Row]:
        """The rows after the warm-up the summary leaves out (dreamddp/run/summary.py)."""
        if not self.raw.get("compact"):
            return self.iterations[warmup_cut(len(self.iterations)):]
        cut = warmup_cut(int(self.summary.get("iterations") or len(self.iterations)))  # compact rows are thinned
        return [r for r in self.iterations if r.iteration >= cut] or self.iterations

    def timed_mean(self, field: str) -> float:
        return statistics.fmean(getattr(r, field) for r in self.timed())

    def wire_per_iteration(self) -> float:
        """Wire bytes per worker per timed iteration; a record made before rows kept ``wire_bytes``
        gives its summary's payload (its algorithms all-reduced: at 2 workers the same figure)."""
        rows = self.timed()
        if not rows or any(r.wire_bytes is None for r in rows):
            return self.payload_per_iteration() if self.summary.get("bytes_per_iteration") is not None else \
                (statistics.fmean(r.bytes for r in rows) if rows else 0.0)
        return statistics.fmean(r.wire for r in rows)

    def payload_per_iteration(self) -> float:
        return self.summary.get("bytes_per_iteration") or 0.0

    def final_loss(self, smooth: int = SMOOTH) -> float:
        losses = [r.loss for r in self.iterations if r.loss is not None]
        return statistics.fmean(losses[-smooth:]) if losses else float("nan")

    def final_eval(self, metric: str = "loss") -> float | None:
        values = [e.get(metric) for e in self.evaluation if e.get(metric) is not None]
        return float(values[-1]) if values else None


def typed(run) -> Record:
    """A Record of a raw or compact record (a Record as it is)."""
    return run if isinstance(run, Record) else Record.of(run, run.get("source"))


# ---- a benchmark folder ----

@dataclass
class Bench:
    """``dreamddp-bench run``'s ``<dir>/runs/``: its arguments (bench.json) and
    ``runs[model][rep][label]`` of every completed segment."""
    args: dict
    runs: dict
    made_by: str | None = None  # the command that made it (bench.json; None before study files)

    def records(self) -> list[Record]:
        return [r for reps in self.runs.values() for segs in reps.values() for r in segs.values()]


def bench(runs_dir: str | Path) -> Bench:
    root = Path(runs_dir)
    made = root / "bench.json"
    runs: dict = {}
    for path in sorted(root.glob("*/rep*/*/run.json")):
        rec = Record.of(json.loads(path.read_text()), str(path.parent), path.parts[-2])
        if rec.status == "completed":
            runs.setdefault(path.parts[-4], {}).setdefault(int(path.parts[-3][3:]), {})[rec.label] = rec
    made = json.loads(made.read_text()) if made.is_file() else {}
    return Bench(made.get("args") or {}, runs, made.get("made_by"))


def bench_of(runs_dir: str | Path, what: str, kind: str = "a folder dreamddp-bench run wrote") -> Bench:
    """``bench(runs_dir)``, refused in one line where it has no bench.json."""
    if not (Path(runs_dir) / "bench.json").is_file():
        raise SystemExit(f"{what}: {runs_dir}: no bench.json (not {kind})")
    return bench(runs_dir)
