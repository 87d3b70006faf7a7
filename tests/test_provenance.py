"""Every run record names the code that made it: commit, dirty tree, source digest."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WRITE_RECORD = ("import sys; from omegaconf import OmegaConf; from dreamddp.run.record import RunRecord; "
                "RunRecord(sys.argv[1], OmegaConf.create({'seed': 0}))")


def _copy(dest: Path) -> Path:
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for tree in ("dreamddp", "conf"):
        shutil.copytree(REPO / tree, dest / tree, ignore=skip)
    return dest


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _record(code: Path, run_dir: Path) -> dict:
    """A run record written by the package in ``code`` (a fresh process: provenance is per process)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    subprocess.run([sys.executable, "-c", WRITE_RECORD, str(run_dir)], check=True, env=env, cwd=run_dir.parent)
    return json.loads((run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    repo = _copy(tmp_path_factory.mktemp("checkout"))
    (repo / "results").mkdir()
    (repo / "results" / "table.csv").write_text("a,b\n1,2\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "copy")
    return repo


@pytest.fixture(scope="module")
def clean(checkout, tmp_path_factory) -> dict:
    """The record the committed checkout writes."""
    return _record(checkout, tmp_path_factory.mktemp("runs") / "clean")


def test_a_record_names_its_commit_and_is_dirty_after_an_edit_of_the_package(checkout, clean, tmp_path):
    sha = _git(checkout, "rev-parse", "HEAD")
    assert clean["provenance"]["git_sha"] == clean["git_sha"] == sha
    assert clean["provenance"]["dirty"] is False
    assert re.fullmatch(r"[0-9a-f]{16}", clean["provenance"]["source"])

    # a results/ file is no source: neither dirty nor another digest
    (checkout / "results" / "table.csv").write_text("a,b\n3,4\n")
    (checkout / "results" / "new.json").write_text("{}")
    after_results = _record(checkout, tmp_path / "results_edited")
    assert after_results["provenance"] == clean["provenance"]

    module = checkout / "dreamddp" / "atomic.py"
    module.write_text(module.read_text() + "\n# an edit\n")
    try:
        edited = _record(checkout, tmp_path / "edited")
    finally:
        _git(checkout, "checkout", "--", "dreamddp/atomic.py")
    assert edited["provenance"]["git_sha"] == sha
    assert edited["provenance"]["dirty"] is True
    assert edited["provenance"]["source"] != clean["provenance"]["source"]


def test_an_installed_copy_outside_git_has_no_commit_but_the_same_digest(clean, tmp_path):
    installed = _copy(tmp_path / "site-packages")
    made_by = _record(installed, tmp_path / "run")["provenance"]
    assert made_by["git_sha"] is None and made_by["dirty"] is None
    assert made_by["source"] == clean["provenance"]["source"]


def test_the_digest_counts_the_code_a_job_runs_and_not_the_report_writers(tmp_path):
    """A report writer only reads records: editing one must not make a completed job another code's
    (dreamddp-bench run --resume would rerun it); editing the engine must."""
    from dreamddp.provenance import source_digest

    copies = {name: _copy(tmp_path / name) / "dreamddp" for name in ("same", "reports", "engine")}
    (copies["reports"] / "reports" / "card.py").write_text("# another card\n")
    (copies["engine"] / "engine" / "plan.py").write_text("# another plan\n")
    digests = {name: source_digest(package) for name, package in copies.items()}
    assert digests["reports"] == digests["same"] != digests["engine"]
