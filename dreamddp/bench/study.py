"""A study file (runners/<study>.yaml) read into typed parts, every field checked before any job starts.

A study names its models (a preset of runners/catalogue/presets.yaml each, with a batch and
iterations where it sets them), its runs (labels of runners/catalogue/runs.yaml, or runs defined
inline), its regime (link, ratio, latency, H, chunk, workers, overrides for every run), its
repetitions, its parts (each a regime change with its own output subfolder), the reports to make
and the claims it is read against.  A bad field is refused in one line naming the file and the
field (``runners/x.yaml: parts[1].regime.ratio: must be > 0``).  docs/benchmark.md has the format.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RUNNERS = ROOT / "runners"
CATALOGUE = RUNNERS / "catalogue"
DEFAULT_ITERATIONS = 44  # per run where neither the regime nor the model preset says
LINKS = ("emulated", "tc")
RUN_LINKS = ("emulated", "ideal")
REPORT_KINDS = ("bench", "tc", "sweep", "methods_card", "accuracy", "accuracy_tc", "gpu")
RUNNERS_KINDS = ("bench", "gpu")  # gpu: dreamddp/bench/gpu.py's steps under one deadline


class StudyError(ValueError):
    """A study file that cannot run: ``<file>: <field>: <why>``."""


@dataclass(frozen=True)
class RunEntry:
    """One run of a job: its spec.json segment (``segment()``), and a note for people."""
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
        """The dict a job's spec carries (the order and fields jobs before study files wrote)."""
        seg = {"label": self.label, "overrides": [_bucket(o, bucket_mb, self.label) for o in self.overrides],
               "link": self.link}
        for key in ("schedule_from", "window", "varies", "memory"):
            if getattr(self, key) is not None:
                seg[key] = getattr(self, key)
        if self.opt_in:
            seg["opt_in"] = True
        return seg


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
    # the records are known to come from several code versions: report them anyway, the report's
    # header listing each commit and its runs (else a report refuses them, naming them)
    mix: bool = False


@dataclass(frozen=True)
class Study:
    path: str
    name: str
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


class _Fields:
    """Reads one mapping of the file, naming ``where`` in every refusal; a key not in ``allowed``
    is refused."""

    def __init__(self, file: str, where: str, raw, allowed: tuple[str, ...]):
        self.file, self.where = file, where
        if not isinstance(raw, dict):
            self.fail("", f"must be a mapping, not {type(raw).__name__}")
        unknown = [k for k in raw if k not in allowed]
        if unknown:
            self.fail(str(unknown[0]), f"unknown field (have {', '.join(allowed)})")
        self.raw = raw

    def fail(self, key: str, why: str):
        name = ".".join(x for x in (self.where, key) if x)
        raise StudyError(f"{self.file}: {name or '(top)'}: {why}")

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


_RUN_FIELDS = ("overrides", "link", "schedule_from", "window", "varies", "memory", "opt_in", "note")


def _run(file: str, where: str, label: str, raw) -> RunEntry:
    f = _Fields(file, where, raw, _RUN_FIELDS + (("label",) if "label" in (raw or {}) else ()))
    overrides = f.strings("overrides")
    if not overrides:
        f.fail("overrides", "must name the run's overrides (algo=...)")
    return RunEntry(label=label, overrides=overrides,
                    link=f.get("link", str, "emulated", lambda v: v in RUN_LINKS, f"must be one of {', '.join(RUN_LINKS)}"),
                    schedule_from=f.get("schedule_from", str), window=f.get("window", float, None, lambda v: v > 0, "must be > 0"),
                    varies=f.get("varies", str), memory=f.get("memory", bool), opt_in=f.get("opt_in", bool, False),
                    note=f.get("note", str, ""))


def catalogue_runs(root: Path = CATALOGUE) -> dict[str, RunEntry]:
    file = os.path.relpath(root / "runs.yaml", ROOT)
    raw = _yaml(root / "runs.yaml", file)
    if not isinstance(raw, dict):
        raise StudyError(f"{file}: (top): must be a mapping of run labels")
    return {label: _run(file, label, label, entry) for label, entry in raw.items()}


def catalogue_presets(root: Path = CATALOGUE) -> dict[str, dict[str, dict]]:
    file = os.path.relpath(root / "presets.yaml", ROOT)
    raw = _yaml(root / "presets.yaml", file)
    if not isinstance(raw, dict):
        raise StudyError(f"{file}: (top): must be a mapping of models")
    out = {}
    for model, presets in raw.items():
        if not isinstance(presets, dict):
            raise StudyError(f"{file}: {model}: must be a mapping of presets")
        out[model] = {}
        for name, entry in presets.items():
            f = _Fields(file, f"{model}.{name}", entry, ("overrides", "bucket_mb", "iterations"))
            out[model][name] = {"overrides": f.strings("overrides"),
                                "bucket_mb": f.get("bucket_mb", float, None, lambda v: v > 0, "must be > 0"),
                                "iterations": f.get("iterations", int, None, lambda v: v >= 1, "must be >= 1")}
    return out


def _models(f: _Fields, key: str, presets: dict) -> tuple[ModelEntry, ...] | None:
    raw = f.raw.get(key)
    if raw is None:
        return None
    if not isinstance(raw, dict) or not raw:
        f.fail(key, "must be a mapping of model -> preset (or {preset, batch, iterations})")
    entries = []
    for name, entry in raw.items():
        where = f"{f.where + '.' if f.where else ''}{key}.{name}"
        if name not in presets:
            raise StudyError(f"{f.file}: {where}: no such model in the presets (have {', '.join(presets)})")
        m = _Fields(f.file, where, {"preset": entry} if isinstance(entry, str) else entry,
                    ("preset", "batch", "iterations"))
        preset = m.get("preset", str)
        if preset not in presets[name]:
            m.fail("preset", f"no {name} preset {preset!r} (have {', '.join(presets[name])})")
        p = presets[name][preset]
        batch = m.get("batch", int, None, lambda v: v >= 1, "must be >= 1")
        entries.append(ModelEntry(name, preset, p["overrides"] + ((f"train.batch_size={batch}",) if batch else ()),
                                  p["bucket_mb"], m.get("iterations", int, p["iterations"], lambda v: v >= 1, "must be >= 1")))
    return tuple(entries)


def _runs(f: _Fields, key: str, catalogue: dict[str, RunEntry]) -> tuple[RunEntry, ...] | None:
    raw = f.raw.get(key)
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        f.fail(key, "must be a list of run labels (or inline runs)")
    runs: list[RunEntry] = []
    for i, item in enumerate(raw):
        where = f"{f.where + '.' if f.where else ''}{key}[{i}]"
        if isinstance(item, str):
            if item not in catalogue:
                raise StudyError(f"{f.file}: {where}: no run {item!r} in runners/catalogue/runs.yaml")
            runs.append(catalogue[item])
        elif isinstance(item, dict) and isinstance(item.get("label"), str):
            runs.append(_run(f.file, where, item["label"], item))
        else:
            raise StudyError(f"{f.file}: {where}: must be a run label or a mapping with a label")
    labels = [r.label for r in runs]
    for i, r in enumerate(runs):
        if labels.count(r.label) > 1:
            raise StudyError(f"{f.file}: {f.where + '.' if f.where else ''}{key}[{i}]: {r.label} named twice")
        if r.schedule_from and (r.schedule_from not in labels or labels.index(r.schedule_from) > i):
            raise StudyError(f"{f.file}: {f.where + '.' if f.where else ''}{key}[{i}]: {r.label} runs on "
                             f"{r.schedule_from}'s schedule, so name {r.schedule_from} before it")
    return tuple(runs)


_REGIME_FIELDS = ("link", "ratio", "latency_ms", "H", "chunk", "nproc", "iterations", "calibration_iterations",
                  "profile_iterations", "memory", "set")


def _regime(file: str, where: str, raw, base: Regime) -> Regime:
    if raw is None:
        return base
    f = _Fields(file, where, raw, _REGIME_FIELDS)
    pos, nonneg = (lambda v: v > 0, "must be > 0"), (lambda v: v >= 0, "must be >= 0")
    one = (lambda v: v >= 1, "must be >= 1")
    regime = replace(
        base,
        link=f.get("link", str, base.link, lambda v: v in LINKS, f"must be one of {', '.join(LINKS)}"),
        ratio=f.get("ratio", float, base.ratio, *pos), latency_ms=f.get("latency_ms", float, base.latency_ms, *nonneg),
        H=f.get("H", int, base.H, *one), chunk=f.get("chunk", int, base.chunk, *nonneg),
        nproc=f.get("nproc", int, base.nproc, *one),
        iterations=f.get("iterations", int, base.iterations, *one),
        calibration_iterations=f.get("calibration_iterations", int, base.calibration_iterations, *one),
        profile_iterations=f.get("profile_iterations", int, base.profile_iterations, *one),
        memory=f.get("memory", bool, base.memory), set=base.set + f.strings("set"))
    if regime.latency_ms and regime.link == "tc":
        f.fail("latency_ms", "the tc link has no latency here (tbf shapes the rate only); use link: emulated")
    return regime


_STUDY_FIELDS = ("about", "claims", "out", "runner", "settings", "models", "runs", "regime", "reps", "parts",
                 "interleave_parts", "report")
_PART_FIELDS = ("name", "out", "models", "runs", "regime", "reps")
_REPORT_FIELDS = ("kind", "out", "inputs", "ratios", "title", "mix")


def load(path: str | os.PathLike, catalogue: Path = CATALOGUE) -> Study:
    """The study in ``path``, every field checked (StudyError: one line naming the file and the field)."""
    file = str(path)
    raw = _yaml(Path(path), file)
    f = _Fields(file, "", raw, _STUDY_FIELDS)
    runs_cat, presets = catalogue_runs(catalogue), catalogue_presets(catalogue)
    about = f.get("about", str)
    if not about:
        f.fail("about", "must say in one line what the study measures")
    runner = f.get("runner", str, "bench", lambda v: v in RUNNERS_KINDS, f"must be one of {', '.join(RUNNERS_KINDS)}")
    models, runs = _models(f, "models", presets), _runs(f, "runs", runs_cat)
    regime = _regime(file, "regime", f.raw.get("regime"), Regime())
    reps = f.get("reps", int, 3, lambda v: v >= 1, "must be >= 1")
    parts = []
    raw_parts = f.raw.get("parts")
    if raw_parts is not None and (not isinstance(raw_parts, list) or not raw_parts):
        f.fail("parts", "must be a non-empty list")
    for i, rp in enumerate(raw_parts or [{}] if (models or raw_parts) else []):
        where = f"parts[{i}]"
        p = _Fields(file, where if raw_parts else "", rp, _PART_FIELDS)
        name = p.get("name", str, "" if not raw_parts else None)
        if name is None:
            p.fail("name", "every part needs a name")
        pm, pr = _models(p, "models", presets) or models, _runs(p, "runs", runs_cat) or runs
        if not pm:
            p.fail("models", "no models (name them in the part or the study)")
        if not pr:
            p.fail("runs", "no runs (name them in the part or the study)")
        part = Part(name=name, out=p.get("out", str, name), models=pm, runs=pr,
                    regime=_regime(file, f"{where}.regime" if raw_parts else "regime", rp.get("regime"), regime),
                    reps=p.get("reps", int, reps, lambda v: v >= 1, "must be >= 1"))
        for j, r in enumerate(part.runs):
            for m in part.models:
                try:
                    r.segment(m.bucket_mb)
                except StudyError as exc:
                    raise StudyError(f"{file}: {where if raw_parts else 'runs'}: {m.name}: {exc}") from None
        parts.append(part)
    names = [p.name for p in parts]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        f.fail("parts", f"part {dup!r} named twice")
    reports = []
    raw_reports = f.raw.get("report") or []
    if not isinstance(raw_reports, list):
        f.fail("report", "must be a list of {kind, inputs, out}")
    for i, rr in enumerate(raw_reports):
        r = _Fields(file, f"report[{i}]", rr, _REPORT_FIELDS)
        kind = r.get("kind", str, None, lambda v: v in REPORT_KINDS, f"must be one of {', '.join(REPORT_KINDS)}")
        if kind is None:
            r.fail("kind", f"required (one of {', '.join(REPORT_KINDS)})")
        ratios = rr.get("ratios") or []
        if not isinstance(ratios, list) or not all(isinstance(x, (int, float)) and x > 0 for x in ratios):
            r.fail("ratios", "must be a list of numbers > 0")
        reports.append(Report(kind, r.get("out", str, "."), r.strings("inputs", (".",)) or (".",),
                              tuple(float(x) for x in ratios), r.get("title", str), r.get("mix", bool, False)))
    claims = f.raw.get("claims") or []
    if isinstance(claims, list) and all(isinstance(c, str) for c in claims):
        claims = tuple(claims)
    elif not (isinstance(claims, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in claims.items())):
        f.fail("claims", "must be a list of lines or a mapping label -> claim")
    settings = f.get("settings", dict, {})
    if runner == "gpu":
        _gpu_settings(file, settings, [p.name for p in parts])
    return Study(path=file, name=Path(path).stem, about=about,
                 out=f.get("out", str, os.path.join("outputs", Path(path).stem)), runner=runner, parts=tuple(parts),
                 reports=tuple(reports), claims=claims, interleave_parts=f.get("interleave_parts", bool, False),
                 settings=settings)


def _gpu_settings(file: str, settings: dict, parts: list[str]) -> None:
    """runner gpu: ``budget_s`` and ``steps`` (name -> a pytest file, profiles, or [part, reps] pairs)."""
    f = _Fields(file, "settings", settings, ("budget_s", "steps"))
    f.get("budget_s", float, None, lambda v: v > 0, "must be > 0")
    steps = f.get("steps", dict)
    if not steps:
        f.fail("steps", "runner gpu needs its steps")
    for name, step in steps.items():
        s = _Fields(file, f"settings.steps.{name}", step,
                    ("cap_s", "pytest", "models", "precisions", "iterations", "profile_iterations", "parts"))
        s.get("cap_s", int, None, lambda v: v > 0, "must be > 0") or s.fail("cap_s", "required")
        if "parts" in step:
            pairs = step["parts"]
            if not isinstance(pairs, list) or not all(isinstance(x, list) and len(x) == 2 and x[0] in parts
                                                      and isinstance(x[1], int) and x[1] >= 1 for x in pairs):
                s.fail("parts", f"must be [part, repetitions] pairs of this study's parts ({', '.join(parts)})")
        elif "precisions" in step:
            s.strings("models") and s.strings("precisions")
            s.get("iterations", int, None, lambda v: v >= 1, "must be >= 1") or s.fail("iterations", "required")
            s.get("profile_iterations", int, None, lambda v: v >= 1, "must be >= 1") or \
                s.fail("profile_iterations", "required")
        elif not s.get("pytest", str):
            s.fail("", "needs parts, precisions (profiles) or pytest")


def resolve_input(study: Study, out: str, item: str) -> str:
    """A report input: ``@<study>`` is that study file's output folder, else a path under ``out``."""
    if item.startswith("@"):
        other = Path(study.path).parent / f"{item[1:]}.yaml"
        return load(other).out
    return os.path.normpath(os.path.join(out, item))
