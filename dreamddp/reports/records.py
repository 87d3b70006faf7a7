"""The typed reader of run records and benchmark folders: the one place a report reads a record's keys.

A run record (``run.json``, dreamddp/run/record.py; or its compact copy, collect.py) becomes a
``Record``: its label, algorithm (name and the options that make it a variant), model, bandwidth,
world size, status, provenance, typed iteration rows, evaluations, memory, profile, prediction and
the rest of ``extra``.  A benchmark folder (``dreamddp-bench run``'s ``<dir>/runs/``: spec.json and
bench.json beside ``<model>/rep<k>/<label>/run.json``) becomes a ``Bench``.

Bytes, one definition: a report's bytes are *wire bytes per worker per iteration*, what this worker
puts on the link (compressed payloads at their encoded size), as the link, the simulator and the
engine's ``wire_bytes`` charge them: ``ring_factor(kind, n) x`` the collective's flat tensor.  A
row's ``bytes`` is that flat tensor's size (the *payload*), which is not what is sent: an all-reduce
on n workers sends 2(n-1)/n of it (1x at 2 workers), an all-gather (n-1)/n of the gathered buffer,
which holds every worker's payload.  That is why top-k on GPT-2 at ratio 7 recorded 0.060 MiB of
``bytes`` per iteration and the methods card 0.030 wire MiB: its compressed payloads travel by
all-gather, and at 2 workers a worker sends half of the gathered buffer (its own part).  Reports
show ``wire_mib`` (``Record.wire_per_iteration``); where the payload helps it is its own column
named "payload MiB/it".  Records made before the engine kept ``wire_bytes`` count ``bytes`` (their
algorithms all-reduced, at 2 workers the same figure).

Provenance: old records carry ``git_sha`` alone; newer ones a ``provenance`` mapping
(git_sha, dirty, source digest).  ``check_provenance`` refuses records of different code in one
report (another commit, another source digest, or uncommitted code no digest names) unless it is
asked to mix them, and then names each version and its runs.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from dreamddp.algorithms import ALGORITHMS
from dreamddp.reports.target import SMOOTH
from dreamddp.run.summary import warmup_cut


# ---- naming: the one algorithm order and the one variant namer every report uses ----

def _display(name: str | None):
    cls = ALGORITHMS.get(name) if name else None
    return None if cls is None else cls.display


def variant(algo: dict) -> str:
    """A run's algorithm as reports name it (``config.algo`` -> dreamddp+overlap, a recipe's name):
    the algorithm's own ``variant`` (dreamddp/algorithms), the name a user types to run it."""
    cls = ALGORITHMS.get(algo["name"])
    return cls.variant(algo) if cls is not None else algo["name"]


def order(label: str, algo: str | None = None) -> tuple:
    """Sort key of a row label: its algorithm's display order (the part before "+", "@" or " ",
    else the record's ``algo`` name), then the label; unknown ones last."""
    display = _display(re.split(r"[+@ ]", label, maxsplit=1)[0]) or _display(algo)
    return (display.order if display is not None else 10**6, label)


def ordered(labels) -> list[str]:
    return sorted(dict.fromkeys(labels), key=order)


def periodic(name: str) -> bool:
    display = _display(name)
    return bool(display and display.periodic)


def authors_keys() -> dict[str, str]:
    """{algorithm: the DreamDDP artifact's name for it} (modelled_times.json), DreamDDP's own left out."""
    keys = {name: _display(name).authors_key for name in ALGORITHMS if _display(name).authors_key}
    return {k: v for k, v in sorted(keys.items(), key=lambda kv: order(kv[0])) if k != "dreamddp"}


def authors_key(label: str) -> str | None:
    """The DreamDDP artifact's name for an algorithm (modelled_times.json), None if it has none."""
    display = _display(label)
    return display.authors_key if display is not None else None


# ---- the typed record ----

@dataclass(frozen=True)
class Provenance:
    git_sha: str | None
    dirty: bool | None = None
    source: str | None = None  # digest of the package's source files

    @classmethod
    def of(cls, raw: dict) -> "Provenance":
        p = raw.get("provenance") or {}
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
    bytes: float = 0.0  # payload: the collectives' flat tensors (module docstring)
    wire_bytes: float | None = None  # what this worker sent (None: an old record)
    elapsed: float | None = None  # compact records: training seconds up to this row
    collectives: tuple = ()  # sampled rows: (complete, deadline, blocked) per collective, seconds in the iteration

    @property
    def wire(self) -> float:
        return self.bytes if self.wire_bytes is None else self.wire_bytes

    @classmethod
    def of(cls, r: dict) -> "Row":
        events = tuple((e.get("complete"), e.get("deadline"), e.get("blocked", 0.0))
                       for e in (r.get("timeline") or {}).get("collectives", []))
        return cls(r.get("iteration", 0), r.get("time", 0.0), r.get("wait", 0.0), r.get("forward", 0.0),
                   r.get("backward", 0.0), r.get("loss"), r.get("bytes", 0), r.get("wire_bytes"), r.get("elapsed"), events)


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
        return cls(e.get("iteration", 0), e.get("elapsed"), {k: v for k, v in e.items() if k not in ("iteration", "elapsed")})


@dataclass(frozen=True)
class Divergence:
    """How far the workers' parameters drifted apart at one iteration: the mean and per unit."""
    iteration: int
    mean: float
    per_unit: list

    @classmethod
    def of(cls, d: dict) -> "Divergence":
        per_unit = d.get("per_unit") or {}
        return cls(d.get("iteration", 0), d.get("mean"), list(per_unit.values()) if isinstance(per_unit, dict) else list(per_unit))


@dataclass
class Record:
    label: str
    algo: str
    options: dict  # config.algo: the options that make the run a variant
    model: str  # name/size
    data: str
    bandwidth: dict
    world: int
    status: str
    provenance: Provenance
    iterations: list[Row]
    evaluation: list[Eval]
    memory: dict | None
    profile: dict | None
    prediction: dict | None  # summary.predicted: the run's own a-priori prediction
    summary: dict
    extra: dict
    path: str | None = None  # the run's folder (or compact record file)
    start_time: float | None = None
    end_time: float | None = None
    # the raw mapping, for the simulator's record-level API (dreamddp/prediction.py, predict.py):
    # the one door through which the analysis reads what this class does not type
    raw: dict = field(default_factory=dict, repr=False)
    divergence: list[Divergence] = field(default_factory=list)

    @classmethod
    def of(cls, raw: dict, path: str | None = None, label: str | None = None) -> "Record":
        config, extra, summary = raw.get("config") or {}, raw.get("extra") or {}, raw.get("summary") or {}
        algo, model = config.get("algo") or {"name": "?"}, config.get("model") or {}
        world = int(summary.get("workers") or extra.get("world_size") or 0)
        return cls(label or variant(algo), algo.get("name", "?"), dict(algo), f"{model.get('name')}/{model.get('size')}",
                   (config.get("data") or {}).get("name", "?"), config.get("bandwidth") or {}, world,
                   raw.get("status", "?"), Provenance.of(raw), [Row.of(r) for r in raw.get("iterations", [])],
                   [Eval.of(e) for e in raw.get("evals") or []], extra.get("memory"), extra.get("profile"),
                   summary.get("predicted"), summary, extra, path, raw.get("start_time"), raw.get("end_time"), raw,
                   [Divergence.of(d) for d in raw.get("divergence") or []])

    @property
    def variant(self) -> str:
        return variant(self.options)

    @property
    def name(self) -> str:
        return self.raw.get("name") or self.label

    @property
    def batch_size(self) -> int | None:
        return ((self.raw.get("config") or {}).get("train") or {}).get("batch_size")

    def epoch(self, iteration: int) -> float:
        """Epochs of this worker's shard done after ``iteration`` (each worker walks its own shard)."""
        per_worker = self.extra.get("samples_per_epoch_per_worker")
        if not per_worker:
            raise ValueError(f"run {self.name}: no samples_per_epoch_per_worker in its record")
        return (iteration + 1) * self.batch_size / per_worker

    @property
    def study(self) -> str:
        """A compact record's study and scale (collect.study_of of its experiment)."""
        return self.raw.get("study", "")

    @property
    def scale(self) -> str:
        return self.raw.get("scale", "")

    @property
    def seed(self):
        return (self.raw.get("config") or {}).get("seed")

    @property
    def H(self) -> int | None:
        return int(self.options["H"]) if periodic(self.algo) and self.options.get("H") is not None else None

    @property
    def paced(self) -> bool:
        return (self.extra.get("link") or {}).get("backend", "ideal") != "ideal"

    @property
    def link(self) -> dict:
        return self.extra.get("link") or {}

    @property
    def mean_iteration(self) -> float:
        return self.summary["mean_iteration_time"]

    @property
    def mean_wait(self) -> float:
        return self.summary["mean_wait"]

    @property
    def mean_backward(self) -> float:
        return self.summary["mean_backward"]

    @property
    def predicted_mean(self) -> float | None:
        """The run's own a-priori mean iteration (made before it trained), None if it made none."""
        return (self.prediction or {}).get("mean_iteration_time")

    @property
    def peak_bytes(self) -> float | None:
        return (self.memory or {}).get("peak_bytes")

    @property
    def memory_note(self) -> str:
        return (self.memory or {}).get("note") or ""

    @property
    def carrier(self) -> str:
        return self.link.get("carrier", "eager")

    @property
    def delayed(self) -> list | None:
        """A delayed-merge plan's late collectives per window position (None without a delay)."""
        return (self.extra.get("algorithm") or {}).get("delayed")

    @property
    def units(self) -> list[tuple[str, int]]:
        """(unit, parameters) in backward order."""
        return [(u["name"], u["numel"]) for u in self.extra.get("units", [])]

    def calibration(self) -> "Calibration":
        """The link calibration of the job this benchmark segment ran in (its rep folder's)."""
        return Calibration.of(json.loads((Path(self.path).parent / "calibration.json").read_text()))

    def timed(self) -> list[Row]:
        """The rows after the warm-up the summary leaves out (dreamddp/run/summary.py)."""
        if not self.raw.get("compact"):
            return self.iterations[warmup_cut(len(self.iterations)):]
        cut = warmup_cut(int(self.summary.get("iterations") or len(self.iterations)))  # compact rows are thinned
        return [r for r in self.iterations if r.iteration >= cut] or self.iterations

    def timed_mean(self, field: str) -> float:
        return statistics.fmean(getattr(r, field) for r in self.timed())

    def wire_per_iteration(self) -> float:
        """Wire bytes per worker per timed iteration (the module's one definition); a record made
        before rows kept ``wire_bytes`` gives its summary's bytes (module docstring)."""
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


def read(path: str | Path, label: str | None = None) -> Record:
    path = Path(path)
    file = path / "run.json" if path.is_dir() else path
    return Record.of(json.loads(file.read_text()), str(file.parent), label)


# ---- a benchmark folder ----

@dataclass(frozen=True)
class Calibration:
    """A job's link calibration (``<rep>/calibration.json``): the rate set for ``ratio``."""
    gbps: float
    model_bytes: float
    ratio: float
    backward_s: float

    @classmethod
    def of(cls, d: dict) -> "Calibration":
        return cls(d.get("gbps"), d.get("model_bytes"), d.get("ratio"), d.get("backward_s"))


@dataclass
class Bench:
    """``dreamddp-bench run``'s ``<dir>/runs/``: its arguments (bench.json), its job spec and
    ``runs[model][rep][label]`` of every completed segment."""
    root: str
    args: dict
    seconds: float | None
    spec: dict
    runs: dict

    def records(self) -> list[Record]:
        return [r for reps in self.runs.values() for segs in reps.values() for r in segs.values()]


def raw(segs: dict) -> dict:
    """{label: raw record with its ``_dir``} of one job: what the analysis modules take."""
    return {label: r.raw for label, r in segs.items()}


def raw_reps(reps: dict) -> dict:
    return {rep: raw(segs) for rep, segs in reps.items()}


def bench(runs_dir: str | Path) -> Bench:
    root = Path(runs_dir)
    made = root / "bench.json"
    meta = json.loads(made.read_text()) if made.is_file() else {}
    spec = next(iter(sorted(root.glob("*/rep*/spec.json"))), None)
    runs: dict = {}
    for path in sorted(root.glob("*/rep*/*/run.json")):
        rec = read(path, path.parts[-2])
        rec.raw["_dir"] = rec.path  # the analysis finds the job's profile and spec beside it
        if rec.status == "completed":
            runs.setdefault(path.parts[-4], {}).setdefault(int(path.parts[-3][3:]), {})[rec.label] = rec
    return Bench(str(root), meta.get("args") or {}, meta.get("seconds"),
                 json.loads(spec.read_text()) if spec else {}, runs)


# ---- provenance across one report ----

class MixedCode(SystemExit):
    """Records of different code in one report (the message names them)."""


def versions(records) -> dict[Provenance, list[str]]:
    """{code version: the runs (labels or paths) made by it}, in the order first met."""
    out: dict[Provenance, list[str]] = defaultdict(list)
    for r in records:
        out[r.provenance].append(_where(r))
    return dict(out)


def _where(r: Record) -> str:
    """A run as the provenance lines name it: its setting, model, repetition and label."""
    parts = [p for p in Path(r.path or r.label).parts if p != "runs"]
    return "/".join(parts[-4:])


def _unidentified(found: dict) -> bool:
    """Several versions, or uncommitted code that no one source digest names."""
    if len(found) > 1:
        return True
    (p,) = found or [Provenance(None)]
    return bool(p.dirty) and not p.source


def check_provenance(records, mix: bool = False, what: str = "report") -> list[str]:
    """[] where every record comes from one version of the code (one commit, clean, or uncommitted
    with one source digest); else, with ``mix``, the header lines that list each version and its
    runs; without it, refuse in one line naming the first few runs of each version."""
    found = versions(records)
    if not _unidentified(found):
        return []
    if not mix:
        named = "; ".join(f"{p.name()}: {', '.join(runs[:3])}{' ...' if len(runs) > 3 else ''}"
                          for p, runs in list(found.items())[:4])
        why = "different code" if len(found) > 1 else "uncommitted code with no source digest"
        raise MixedCode(f"{what}: records of {why} ({named}); pass --mix (mix=True) to report them together")
    return [f"{p.name()} -> {len(runs)} runs: {', '.join(runs[:6])}{' ...' if len(runs) > 6 else ''}"
            for p, runs in found.items()]


def mixed_folders(root: Path) -> dict[str, dict[Provenance, list[str]]]:
    """{benchmark folder (holding runs/bench.json): its code versions} for every folder under
    ``root`` whose records come from more than one version, or from uncommitted code."""
    out = {}
    for made in sorted(root.rglob("runs/bench.json")):
        found = versions(bench(made.parent).records())
        if _unidentified(found):
            out[str(made.parent.parent)] = found
    return out
