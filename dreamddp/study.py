"""A study file (runners/<study>.yaml) read into typed parts, every field checked before any job starts.

A bad field is refused in one line naming the file and the field
(``runners/x.yaml: parts[1].regime.ratio: must be > 0``); docs/benchmark.md has the format.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUNNERS = ROOT / "runners"
CATALOGUE = RUNNERS / "catalogue"
DEFAULT_ITERATIONS = 44  # per run where neither the regime nor the model preset says
LINKS = ("emulated", "tc")
RUN_LINKS = ("emulated", "ideal")
REPORT_KINDS = ("bench", "tc", "sweep", "methods_card", "accuracy", "accuracy_tc", "gpu", "plan_table4")
RUNNERS_KINDS = ("bench", "gpu")  # gpu: dreamddp/bench/gpu.py's steps under one deadline
POS, NONNEG, ONE = ((lambda v: v > 0, "must be > 0"), (lambda v: v >= 0, "must be >= 0"),
                    (lambda v: v >= 1, "must be >= 1"))


class StudyError(ValueError):
    """A study file that cannot run: ``<file>: <field>: <why>``."""


@dataclass(frozen=True)
class RunEntry:
    label: str
    overrides: tuple[str, ...]
    link: str = "emulated"
    schedule_from: str | None = None
    window: float | None = None
    varies: str | None = None
    memory: bool | None = None
    opt_in: bool = False
    note: str = ""

    def segment(self, bucket_mb: float | None) -> dict:
        """The dict a job's spec carries (its fields in the order spec.json has always had them)."""
        seg = {"label": self.label, "overrides": [_bucket(o, bucket_mb, self.label) for o in self.overrides],
               "link": self.link}
        seg.update({k: getattr(self, k) for k in ("schedule_from", "window", "varies", "memory")
                    if getattr(self, k) is not None})
        return {**seg, "opt_in": True} if self.opt_in else seg


@dataclass(frozen=True)
class ModelEntry:
    name: str
    preset: str
    overrides: tuple[str, ...]
    bucket_mb: float | None
    iterations: int | None


@dataclass(frozen=True)
class Regime:
    link: str = "emulated"
    ratio: float = 7.0
    latency_ms: float = 0.0
    H: int = 10
    chunk: int = 0  # iterations of one run per turn; 0: one H-window
    nproc: int = 2
    iterations: int | None = None  # per run; None: the model's, else DEFAULT_ITERATIONS
    calibration_iterations: int = 16
    profile_iterations: int = 5
    memory: bool = True  # the memory runs, in repetition 0
    twins: bool = True  # link tc: each run also on the emulated link at the same rate (false: the tc runs only)
    uplinks: tuple[float, ...] = ()  # link tc: each worker's uplink, a multiple of the calibrated rate (worker_gbps)
    set: tuple[str, ...] = ()  # Hydra overrides for every run


@dataclass(frozen=True)
class Part:
    """One regime of a study, fully resolved: what its jobs need."""
    name: str
    out: str  # relative to the study's output folder ("" for a study without parts)
    models: tuple[ModelEntry, ...]
    runs: tuple[RunEntry, ...]
    regime: Regime
    reps: int


@dataclass(frozen=True)
class Report:
    kind: str
    out: str  # relative to the study's output folder
    inputs: tuple[str, ...]  # relative to it, or "@<study>": that study's output folder
    ratios: tuple[float, ...] = ()
    title: str | None = None
    mix: bool = False  # report records of several code versions, the header listing each commit


@dataclass(frozen=True)
class Study:
    path: str
    about: str
    out: str
    runner: str
    parts: tuple[Part, ...]
    reports: tuple[Report, ...]
    claims: dict[str, str] | tuple[str, ...]
    interleave_parts: bool = False  # repetition k of every part before any part's k+1
    settings: dict = field(default_factory=dict)  # a runner's own (gpu: budget_s, steps)


def _bucket(override: str, bucket_mb: float | None, label: str) -> str:
    if "{bucket_mb}" not in override:
        return override
    if bucket_mb is None:
        raise StudyError(f"run {label}: needs its model preset's bucket_mb")
    return override.replace("{bucket_mb}", str(bucket_mb))


def _one_of(choices: tuple[str, ...]):
    return lambda v: v in choices, f"must be one of {', '.join(choices)}"


class _Fields:
    """One mapping of the file, naming ``where`` in every refusal; a key not in ``allowed`` is refused."""

    def __init__(self, file: str, where: str, raw, allowed: tuple[str, ...]):
        self.file, self.where = file, where
        if not isinstance(raw, dict):
            self.fail("", f"must be a mapping, not {type(raw).__name__}")
        unknown = [k for k in raw if k not in allowed]
        if unknown:
            self.fail(str(unknown[0]), f"unknown field (have {', '.join(allowed)})")
        self.raw = raw

    def name(self, key: str) -> str:
        return ".".join(x for x in (self.where, key) if x)

    def fail(self, key: str, why: str):
        raise StudyError(f"{self.file}: {self.name(key) or '(top)'}: {why}")

    def get(self, key, kind, default=None, check=None, why=""):
        if key not in self.raw or self.raw[key] is None and default is None:
            return default
        value = self.raw[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind in (int, float) and isinstance(value, bool)):
            self.fail(key, f"must be {kind.__name__}, not {value!r}")
        if check is not None and not check(value):
            self.fail(key, f"{why} (got {value!r})")
        return value

    def strings(self, key, default=()) -> tuple[str, ...]:
        value = self.raw.get(key)
        if value is None:
            return tuple(default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(key, "must be a list of strings")
        return tuple(value)


def _yaml(path: Path, file: str):
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise StudyError(f"{file}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise StudyError(f"{file}: not YAML ({str(exc).splitlines()[0]})") from None


def _run(file: str, where: str, label: str, raw) -> RunEntry:
    allowed = ("overrides", "link", "schedule_from", "window", "varies", "memory", "opt_in", "note")
    f = _Fields(file, where, raw, allowed + (("label",) if "label" in (raw or {}) else ()))
    overrides = f.strings("overrides")
    if not overrides:
        f.fail("overrides", "must name the run's overrides (algo=...)")
    return RunEntry(label=label, overrides=overrides, link=f.get("link", str, "emulated", *_one_of(RUN_LINKS)),
                    schedule_from=f.get("schedule_from", str), window=f.get("window", float, None, *POS),
                    varies=f.get("varies", str), memory=f.get("memory", bool), opt_in=f.get("opt_in", bool, False),
                    note=f.get("note", str, ""))


def _catalogue(root: Path, name: str, what: str) -> tuple[str, dict]:
    file = os.path.relpath(root / name, ROOT)
    raw = _yaml(root / name, file)
    if not isinstance(raw, dict):
        raise StudyError(f"{file}: (top): must be a mapping of {what}")
    return file, raw


def catalogue_runs(root: Path = CATALOGUE) -> dict[str, RunEntry]:
    file, raw = _catalogue(root, "runs.yaml", "run labels")
    return {label: _run(file, label, label, entry) for label, entry in raw.items()}


def catalogue_presets(root: Path = CATALOGUE) -> dict[str, dict[str, dict]]:
    file, raw = _catalogue(root, "presets.yaml", "models")
    out = {}
    for model, presets in raw.items():
        if not isinstance(presets, dict):
            raise StudyError(f"{file}: {model}: must be a mapping of presets")
        out[model] = {}
        for name, entry in presets.items():
            f = _Fields(file, f"{model}.{name}", entry, ("overrides", "bucket_mb", "iterations"))
            out[model][name] = {"overrides": f.strings("overrides"), "bucket_mb": f.get("bucket_mb", float, None, *POS),
                                "iterations": f.get("iterations", int, None, *ONE)}
    return out


def _models(f: _Fields, key: str, presets: dict) -> tuple[ModelEntry, ...] | None:
    raw = f.raw.get(key)
    if raw is None:
        return None
    if not isinstance(raw, dict) or not raw:
        f.fail(key, "must be a mapping of model -> preset (or {preset, batch, iterations})")
    entries = []
    for name, entry in raw.items():
        if name not in presets:
            f.fail(f"{key}.{name}", f"no such model in the presets (have {', '.join(presets)})")
        m = _Fields(f.file, f.name(f"{key}.{name}"), {"preset": entry} if isinstance(entry, str) else entry,
                    ("preset", "batch", "iterations"))
        preset = m.get("preset", str)
        if preset not in presets[name]:
            m.fail("preset", f"no {name} preset {preset!r} (have {', '.join(presets[name])})")
        p = presets[name][preset]
        batch = m.get("batch", int, None, *ONE)
        entries.append(ModelEntry(name, preset, p["overrides"] + ((f"train.batch_size={batch}",) if batch else ()),
                                  p["bucket_mb"], m.get("iterations", int, p["iterations"], *ONE)))
    return tuple(entries)


def _runs(f: _Fields, key: str, catalogue: dict[str, RunEntry]) -> tuple[RunEntry, ...] | None:
    raw = f.raw.get(key)
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        f.fail(key, "must be a list of run labels (or inline runs)")
    runs: list[RunEntry] = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            if item not in catalogue:
                f.fail(f"{key}[{i}]", f"no run {item!r} in runners/catalogue/runs.yaml")
            runs.append(catalogue[item])
        elif isinstance(item, dict) and isinstance(item.get("label"), str):
            runs.append(_run(f.file, f.name(f"{key}[{i}]"), item["label"], item))
        else:
            f.fail(f"{key}[{i}]", "must be a run label or a mapping with a label")
    labels = [r.label for r in runs]
    for i, r in enumerate(runs):
        if labels.count(r.label) > 1:
            f.fail(f"{key}[{i}]", f"{r.label} named twice")
        if r.schedule_from and (r.schedule_from not in labels or labels.index(r.schedule_from) > i):
            f.fail(f"{key}[{i}]", f"{r.label} runs on {r.schedule_from}'s schedule, "
                                  f"so name {r.schedule_from} before it")
    return tuple(runs)


def _regime(file: str, where: str, raw, base: Regime) -> Regime:
    if raw is None:
        return base
    f = _Fields(file, where, raw, ("link", "ratio", "latency_ms", "H", "chunk", "nproc", "iterations",
                                   "calibration_iterations", "profile_iterations", "memory", "twins", "uplinks", "set"))
    checks = {"ratio": POS, "latency_ms": NONNEG, "chunk": NONNEG, "link": _one_of(LINKS)}
    values = {k: f.get(k, type(getattr(base, k)) if k != "iterations" else int, getattr(base, k), *checks.get(k, ONE))
              for k in ("link", "ratio", "latency_ms", "H", "chunk", "nproc", "iterations", "calibration_iterations",
                        "profile_iterations")}
    uplinks = f.get("uplinks", list, list(base.uplinks))
    if not all(isinstance(u, (int, float)) and not isinstance(u, bool) and u > 0 for u in uplinks):
        f.fail("uplinks", f"must be a list of numbers > 0, one per worker (got {uplinks!r})")
    regime = replace(base, **values, memory=f.get("memory", bool, base.memory), twins=f.get("twins", bool, base.twins),
                     uplinks=tuple(float(u) for u in uplinks), set=base.set + f.strings("set"))
    if regime.latency_ms and regime.link == "tc":
        f.fail("latency_ms", "the tc link has no latency here (tbf shapes the rate only); use link: emulated")
    if not regime.twins and regime.link != "tc":
        f.fail("twins", "only a part on the tc link has emulated twins to leave out")
    if regime.uplinks and (regime.link != "tc" or len(regime.uplinks) != regime.nproc):
        f.fail("uplinks", f"one per worker ({regime.nproc}), on the tc link only")
    return regime


def _part(file: str, i: int, rp, raw_parts, study: dict) -> Part:
    where = f"parts[{i}]"
    p = _Fields(file, where if raw_parts else "", rp, ("name", "out", "models", "runs", "regime", "reps"))
    name = p.get("name", str, "" if not raw_parts else None)
    if name is None:
        p.fail("name", "every part needs a name")
    models = _models(p, "models", study["presets"]) or study["models"]
    runs = _runs(p, "runs", study["catalogue"]) or study["runs"]
    if not models:
        p.fail("models", "no models (name them in the part or the study)")
    if not runs:
        p.fail("runs", "no runs (name them in the part or the study)")
    part = Part(name=name, out=p.get("out", str, name), models=models, runs=runs,
                regime=_regime(file, f"{where}.regime" if raw_parts else "regime", rp.get("regime"), study["regime"]),
                reps=p.get("reps", int, study["reps"], *ONE))
    for r in part.runs:
        for m in part.models:
            try:
                r.segment(m.bucket_mb)
            except StudyError as exc:
                raise StudyError(f"{file}: {where if raw_parts else 'runs'}: {m.name}: {exc}") from None
    return part


def _report(file: str, i: int, rr) -> Report:
    r = _Fields(file, f"report[{i}]", rr, ("kind", "out", "inputs", "ratios", "title", "mix"))
    kind = r.get("kind", str, None, *_one_of(REPORT_KINDS))
    if kind is None:
        r.fail("kind", f"required (one of {', '.join(REPORT_KINDS)})")
    ratios = rr.get("ratios") or []
    if not isinstance(ratios, list) or not all(isinstance(x, (int, float)) and x > 0 for x in ratios):
        r.fail("ratios", "must be a list of numbers > 0")
    return Report(kind, r.get("out", str, "."), r.strings("inputs", (".",)) or (".",), tuple(float(x) for x in ratios),
                  r.get("title", str), r.get("mix", bool, False))


def load(path: str | os.PathLike, catalogue: Path = CATALOGUE) -> Study:
    """The study in ``path``, every field checked (StudyError: one line naming the file and the field)."""
    file = str(path)
    f = _Fields(file, "", _yaml(Path(path), file), ("about", "claims", "out", "runner", "settings", "models", "runs",
                                                     "regime", "reps", "parts", "interleave_parts", "report"))
    about = f.get("about", str)
    if not about:
        f.fail("about", "must say in one line what the study measures")
    runner = f.get("runner", str, "bench", *_one_of(RUNNERS_KINDS))
    study = {"catalogue": catalogue_runs(catalogue), "presets": catalogue_presets(catalogue)}
    study["models"] = _models(f, "models", study["presets"])
    study["runs"] = _runs(f, "runs", study["catalogue"])
    study.update(regime=_regime(file, "regime", f.raw.get("regime"), Regime()), reps=f.get("reps", int, 3, *ONE))
    raw_parts = f.raw.get("parts")
    if raw_parts is not None and (not isinstance(raw_parts, list) or not raw_parts):
        f.fail("parts", "must be a non-empty list")
    parts = [_part(file, i, rp, raw_parts, study)
             for i, rp in enumerate(raw_parts or [{}] if (study["models"] or raw_parts) else [])]
    names = [p.name for p in parts]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        f.fail("parts", f"part {dup!r} named twice")
    raw_reports = f.raw.get("report") or []
    if not isinstance(raw_reports, list):
        f.fail("report", "must be a list of {kind, inputs, out}")
    reports = tuple(_report(file, i, rr) for i, rr in enumerate(raw_reports))
    claims = f.raw.get("claims") or []
    if isinstance(claims, list) and all(isinstance(c, str) for c in claims):
        claims = tuple(claims)
    elif not (isinstance(claims, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in claims.items())):
        f.fail("claims", "must be a list of lines or a mapping label -> claim")
    settings = f.get("settings", dict, {})
    if runner == "gpu":
        _gpu_settings(file, settings, names)
    return Study(path=file, about=about, out=f.get("out", str, os.path.join("outputs", Path(path).stem)),
                 runner=runner, parts=tuple(parts), reports=reports, claims=claims,
                 interleave_parts=f.get("interleave_parts", bool, False), settings=settings)


def _gpu_settings(file: str, settings: dict, parts: list[str]) -> None:
    """runner gpu: ``budget_s`` and ``steps`` (name -> a pytest file, profiles, or [part, reps] pairs)."""
    f = _Fields(file, "settings", settings, ("budget_s", "steps"))
    f.get("budget_s", float, None, *POS)
    steps = f.get("steps", dict)
    if not steps:
        f.fail("steps", "runner gpu needs its steps")
    for name, step in steps.items():
        s = _Fields(file, f"settings.steps.{name}", step,
                    ("cap_s", "pytest", "models", "precisions", "iterations", "profile_iterations", "parts"))
        s.get("cap_s", int, None, *POS) or s.fail("cap_s", "required")
        if "parts" in step:
            pairs = step["parts"]
            if not isinstance(pairs, list) or not all(isinstance(x, list) and len(x) == 2 and x[0] in parts
                                                      and isinstance(x[1], int) and x[1] >= 1 for x in pairs):
                s.fail("parts", f"must be [part, repetitions] pairs of this study's parts ({', '.join(parts)})")
        elif "precisions" in step:
            s.strings("models") and s.strings("precisions")
            for key in ("iterations", "profile_iterations"):
                s.get(key, int, None, *ONE) or s.fail(key, "required")
        elif not s.get("pytest", str):
            s.fail("", "needs parts, precisions (profiles) or pytest")


def resolve_input(study: Study, out: str, item: str) -> str:
    """A report input: ``@<study>`` is that study file's output folder, else a path under ``out``."""
    if item.startswith("@"):
        return load(Path(study.path).parent / f"{item[1:]}.yaml").out
    return os.path.normpath(os.path.join(out, item))
