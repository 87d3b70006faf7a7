"""Which code made a result: the git commit, whether the tree differed from it, and a digest
of the source itself (which also names uncommitted code, and code installed outside git).

Computed once per process (the code a process runs does not change under it).  From an
installed tree, not a git checkout, the commit and the dirty flag are None; the digest is
there either way.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CONFIG_NAME = "config"  # conf/config.yaml marks the config tree (dreamddp.config.conf_dir)
# bench/ modules a benchmark job runs; the rest of bench/ only reads records into reports, which
# are remade every time, so editing one must not make a job's code "another job's"
JOB_MODULES = ("jobs", "worker", "segments", "memory")
GIT_TIMEOUT_S = 5.0


def conf_tree(package: Path = PACKAGE) -> Path | None:
    """The Hydra config tree of ``package``: ``<repo>/conf`` in a checkout, ``<prefix>/share/
    dreamddp/conf`` installed from a wheel (where dreamddp.config.conf_dir looks; that module
    is a layer above this one)."""
    for candidate in (package.parent / "conf", Path(sys.prefix) / "share" / "dreamddp" / "conf"):
        if (candidate / f"{CONFIG_NAME}.yaml").is_file():
            return candidate
    return None


@functools.cache
def source_digest(package: Path = PACKAGE) -> str:
    """sha256 (16 hex digits) over the package's .py files less what only reads records (reports/,
    bench/ outside JOB_MODULES), and the config tree's .yaml files, each with its relative path:
    committed or not."""
    digest, bench, reports = hashlib.sha256(), package / "bench", package / "reports"
    paths = [p for p in package.rglob("*.py")
             if not p.is_relative_to(reports) and (p.parent != bench or p.stem in JOB_MODULES)]
    conf = conf_tree(package)
    for root, found in ((package, paths), (conf, list(conf.rglob("*.yaml")) if conf else [])):
        for path in sorted(found):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _git(top: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(top), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _checkout(package: Path) -> Path | None:
    """The git work tree the package is the ``dreamddp/`` folder of (None: an installed copy,
    even one that happens to sit inside some other repository)."""
    top = _git(package, "rev-parse", "--show-toplevel")
    if top is None or Path(top.strip()).resolve() / package.name != package:
        return None
    return Path(top.strip()).resolve()


@functools.cache
def provenance(package: Path = PACKAGE) -> dict:
    """``git_sha`` (None outside a checkout), ``dirty`` (tracked files under the package or
    conf/ differ from that commit; None outside a checkout) and ``source`` (source_digest)."""
    top = _checkout(package)
    sha = None if top is None else (_git(top, "rev-parse", "HEAD") or "").strip() or None
    status = None if sha is None else _git(top, "status", "--porcelain", "--untracked-files=no", "--",
                                           package.name, "conf")
    return {"git_sha": sha, "dirty": None if status is None else bool(status.strip()),
            "source": source_digest(package)}
