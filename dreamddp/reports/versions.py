"""The code versions across one report's run records: one version (one source digest, or one
clean commit) is reported as such, naming the commits its records were made at; several are
refused unless the report mixes them and says so at its top."""

from __future__ import annotations

import collections
from pathlib import Path

from dreamddp.reports.records import Provenance, bench

def versions(records) -> dict[Provenance, list[str]]:
    """{code version: its runs, named by setting, model, repetition and label}, in the order first met.
    The code is the source digest where a record has one (commits that change only docs or results
    are the same code), else the commit and its dirty flag; a version is named by its first record."""
    out: dict = {}
    for r in records:
        p = r.provenance
        out.setdefault(p.source or (p.git_sha, p.dirty), (p, []))[1].append(
            "/".join([part for part in Path(r.path or r.label).parts if part != "runs"][-4:]))
    return dict(out.values())


def _unidentified(found: dict) -> bool:
    """Several versions, or uncommitted code that no one source digest names."""
    return len(found) > 1 or any(p.dirty and not p.source for p in found)


def check_provenance(records, mix: bool = False, what: str = "report") -> tuple[list[str], str]:
    """(mixed, code): where every record comes from one version of the code (one commit, clean, or
    uncommitted with one source digest), no mixed lines and ``code_line``'s; else, with ``mix``,
    header lines listing each version and its runs, and no code line; without it, refuse in one
    line naming the first few runs of each version."""
    records = list(records)
    found = versions(records)
    if not _unidentified(found):
        return [], code_line(records)
    if not mix:
        named = "; ".join(f"{p.name()}: {', '.join(runs[:3])}{' ...' if len(runs) > 3 else ''}"
                          for p, runs in list(found.items())[:4])
        why = "different code" if len(found) > 1 else "uncommitted code with no source digest"
        raise SystemExit(f"{what}: records of {why} ({named}); pass --mix (mix=True) to report them together")
    return [f"{p.name()} -> {len(runs)} runs: {', '.join(runs[:6])}{' ...' if len(runs) > 6 else ''}"
            for p, runs in found.items()], ""


def mixed_folders(root: Path) -> dict[str, dict[Provenance, list[str]]]:
    """{benchmark folder: its code versions} for every one under ``root`` of mixed or uncommitted code."""
    found = {str(made.parent.parent): versions(bench(made.parent).records())
             for made in sorted(root.rglob("runs/bench.json"))}
    return {folder: v for folder, v in found.items() if _unidentified(v)}


def code_line(records) -> str:
    """The one code version of ``records``, in words, with the commits its records were made at
    (commits that change no job code share a source digest); "" where they mix versions (the
    header lines of ``check_provenance`` say it) or there are none."""
    found = versions(records)
    if not found or _unidentified(found):
        return ""
    (p,) = found
    commits = collections.Counter(Provenance(r.provenance.git_sha, r.provenance.dirty).name() for r in records)
    if len(commits) == 1:
        return f"Code: one version, {p.name()}."
    made = ", ".join(f"{c} ({n} run{'' if n == 1 else 's'})" for c, n in commits.items())
    return (f"Code: one version, source digest {p.source[:8]}; its records were made at {len(commits)} commits "
            f"that changed no job code: {made}.")
