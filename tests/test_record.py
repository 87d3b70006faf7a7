"""Run record: complete JSON after every write, no temp leftovers, status transitions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dreamddp.atomic import write_json as write_json_atomic
from dreamddp.run.record import RECORD_NAME, RunRecord, load_record, mark_failed


@pytest.fixture
def cfg():
    return OmegaConf.create({"algo": {"name": "ssgd"}, "train": {"iterations": 3}, "ref": "${algo.name}"})


def _only_record(run_dir: Path) -> dict:
    assert [p.name for p in run_dir.iterdir()] == [RECORD_NAME], "temporary files left behind"
    return json.loads((run_dir / RECORD_NAME).read_text())


def test_lifecycle_and_content(tmp_path, cfg):
    rec = RunRecord(str(tmp_path), cfg, flush_seconds=1e9, flush_iterations=2)
    data = _only_record(tmp_path)
    assert data["status"] == "running" and data["end_time"] is None
    assert data["config"]["ref"] == "ssgd"  # resolved
    assert set(data["versions"]) >= {"python", "torch", "transformers", "hydra-core"}
    assert data["hardware"]["cores"] == os.cpu_count()
    assert "git_sha" in data

    rec.add_iteration({"iteration": 0, "time": 0.1, "loss": 2.0})
    assert _only_record(tmp_path)["iterations"] == []  # not yet due
    rec.add_iteration({"iteration": 1, "time": 0.1, "loss": 1.5, "custom": 7})
    assert [r["iteration"] for r in _only_record(tmp_path)["iterations"]] == [0, 1]  # every 2

    rec.add_eval({"iteration": 1, "loss": 1.4})
    rec.add_divergence({"iteration": 1, "mean": 0.01})
    rec.set("link", {"backend": "ideal"})
    rec.finish({"mean_iteration_time": 0.1})
    data = _only_record(tmp_path)
    assert data["status"] == "completed" and data["error"] is None
    assert data["end_time"] >= data["start_time"]
    assert data["iterations"][1]["custom"] == 7
    assert data["evals"] == [{"iteration": 1, "loss": 1.4}]
    assert data["divergence"] == [{"iteration": 1, "mean": 0.01}]
    assert data["extra"]["link"] == {"backend": "ideal"}
    assert data["summary"] == {"mean_iteration_time": 0.1}
    assert load_record(tmp_path) == load_record(tmp_path / RECORD_NAME) == data


def test_time_based_flush(tmp_path, cfg):
    rec = RunRecord(str(tmp_path), cfg, flush_seconds=0.0, flush_iterations=10**6)
    rec.add_iteration({"iteration": 0})
    assert len(_only_record(tmp_path)["iterations"]) == 1


def test_fail(tmp_path, cfg):
    rec = RunRecord(str(tmp_path), cfg)
    rec.fail("RuntimeError: boom")
    data = _only_record(tmp_path)
    assert (data["status"], data["error"]) == ("failed", "RuntimeError: boom")
    assert rec.status == "failed"


def test_iteration_needs_index(tmp_path, cfg):
    with pytest.raises(ValueError, match="iteration"):
        RunRecord(str(tmp_path), cfg).add_iteration({"loss": 1.0})


def test_failed_write_keeps_old_record_and_no_tmp(tmp_path):
    path = tmp_path / RECORD_NAME
    write_json_atomic(path, {"status": "running"})
    with pytest.raises(TypeError):
        # default=str makes most objects serialisable; a non-str key is not
        write_json_atomic(path, {("tuple", "key"): 1})
    assert json.loads(path.read_text()) == {"status": "running"}
    assert [p.name for p in tmp_path.iterdir()] == [RECORD_NAME]


def test_mark_failed(tmp_path, cfg):
    # missing record: created as failed, with the config
    assert mark_failed(str(tmp_path / "a"), cfg, "workers died")
    data = load_record(tmp_path / "a")
    assert (data["status"], data["error"], data["config"]["algo"]["name"]) == ("failed", "workers died", "ssgd")
    # running record: closed as failed, its series kept
    rec = RunRecord(str(tmp_path / "b"), cfg)
    rec.add_iteration({"iteration": 0})
    rec.flush()
    assert mark_failed(str(tmp_path / "b"), cfg, "killed")
    data = load_record(tmp_path / "b")
    assert data["status"] == "failed" and len(data["iterations"]) == 1
    # completed record: left alone
    RunRecord(str(tmp_path / "c"), cfg).finish({})
    assert not mark_failed(str(tmp_path / "c"), cfg, "late")
    assert load_record(tmp_path / "c")["status"] == "completed"


def test_wandb_mode_env_wins():
    from dreamddp.run.wandb_log import resolve_mode

    assert resolve_mode("offline", {}) == "offline"
    assert resolve_mode("offline", {"WANDB_MODE": "disabled"}) == "disabled"
    assert resolve_mode("disabled", {"WANDB_MODE": "dryrun"}) == "offline"
    with pytest.raises(ValueError, match="wandb mode"):
        resolve_mode("cloud", {})


def _wandb_script(run_dir, enabled: bool, finish: str = "log.finish(0)") -> str:
    return f"""
import json, sys
from omegaconf import OmegaConf
from dreamddp.run.wandb_log import WandbLogger
cfg = OmegaConf.create({{"wandb": {{"mode": "offline", "project": "p", "entity": None, "group": None,
                       "tags": ["t"]}}, "experiment": {{"name": "exp"}}, "algo": {{"name": "ssgd"}}}})
log = WandbLogger(cfg, {str(run_dir)!r}, enabled={enabled})
run = log.run
info = [run.group, run.job_type, run.name] if run else None
log.log(0, {{"loss": 1.0}}); log.summary({{"final": 1}}); {finish}
print(json.dumps({{"imported": "wandb" in sys.modules, "info": info}}))
"""


def test_wandb_disabled_imports_nothing(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "WANDB_MODE": "offline"}
    out = subprocess.run([sys.executable, "-c", _wandb_script(tmp_path, False)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert json.loads(out.stdout.splitlines()[-1]) == {"imported": False, "info": None}, out.stderr


def test_wandb_offline_run_lands_in_run_dir(tmp_path):
    import subprocess
    import sys

    run_dir = tmp_path / "2024_ssgd_gpt2"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    out = subprocess.run([sys.executable, "-c", _wandb_script(run_dir, True)], env=env,
                         capture_output=True, text=True, timeout=300)
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["info"] == ["exp", "ssgd", "2024_ssgd_gpt2"], out.stderr
    assert list((run_dir / "wandb").glob("offline-run-*"))


def test_a_preempted_run_ends_its_wandb_run_as_preempting(tmp_path):
    """W&B's contract for a run stopped to be resumed: mark_preempting, then a non-zero exit."""
    import subprocess
    import sys

    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    out = subprocess.run([sys.executable, "-c", _wandb_script(tmp_path / "run", True,
                                                             "log.finish(75, preempting=True)")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and json.loads(out.stdout.splitlines()[-1])["info"], out.stderr
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    from dreamddp.run.wandb_log import WandbLogger

    calls = []

    class Run:  # the order of the calls, on a stand-in for wandb's Run
        def mark_preempting(self):
            calls.append("mark_preempting")

        def finish(self, exit_code):
            calls.append(("finish", exit_code))

    log = WandbLogger.__new__(WandbLogger)
    log.run = Run()
    log.finish(75, preempting=True)
    assert calls == ["mark_preempting", ("finish", 75)] and log.run is None


def test_mark_failed_names_the_first_failure_over_rank0s_view(tmp_path, cfg):
    RunRecord(str(tmp_path), cfg).fail("rank 0: RuntimeError: Connection reset by peer")
    assert not mark_failed(str(tmp_path), cfg, "late")  # without a root cause, rank 0's word stands
    failure = {"rank": 1, "reason": "killed by SIGKILL", "kind": "signal"}
    assert mark_failed(str(tmp_path), cfg, "rank 1: killed by SIGKILL", failure)
    data = load_record(tmp_path)
    assert data["status"] == "failed" and data["error"] == "rank 1: killed by SIGKILL"
    assert data["extra"]["failure"]["rank0_error"] == "rank 0: RuntimeError: Connection reset by peer"
    mark_failed(str(tmp_path / "new"), cfg, "rank 0: killed by SIGKILL", {**failure, "rank": 0})
    assert load_record(tmp_path / "new")["extra"]["failure"]["rank"] == 0


def test_preempted_is_not_failed(tmp_path, cfg):
    RunRecord(str(tmp_path), cfg).preempt("preempted: checkpoint saved at step 4")
    assert not mark_failed(str(tmp_path), cfg, "workers exited with status 0")
    assert load_record(tmp_path)["status"] == "preempted"


def test_continuing_from_a_checkpoint_of_the_same_run_keeps_the_rows_before_it(tmp_path, cfg):
    first = RunRecord(str(tmp_path), cfg, flush_seconds=1e9)
    for i in range(5):
        first.add_iteration({"iteration": i, "loss": 1.0})
    first.add_eval({"iteration": 3, "loss": 0.5})
    first.add_checkpoint({"iteration": 2, "step": 3, "dir": "checkpoints/step-0000003"})
    first.set("link_calibration", {"gbps": 0.2})
    first.set("profile", {"dir": "profile"})
    first.fail("rank 1: killed by SIGKILL")
    ckpt = tmp_path / "checkpoints" / "step-0000003"
    ckpt.mkdir(parents=True)
    (ckpt / "meta.json").write_text(json.dumps({"step": 3, "run": {}}))
    again = RunRecord(str(tmp_path), OmegaConf.merge(cfg, {"train": {"resume": str(ckpt)}}))
    data = load_record(tmp_path)
    assert [r["iteration"] for r in data["iterations"]] == [0, 1, 2] and data["evals"] == []
    assert data["start_time"] == first.data["start_time"] and data["status"] == "running"
    assert data["extra"]["restarts"][0]["previous_error"] == "rank 1: killed by SIGKILL"
    assert again.data["extra"]["checkpoints"][0]["step"] == 3
    assert data["extra"]["link_calibration"] == {"gbps": 0.2} and data["extra"]["profile"] == {"dir": "profile"}
    other = RunRecord(str(tmp_path / "elsewhere"), OmegaConf.merge(cfg, {"train": {"resume": str(ckpt)}}))
    assert other.data["iterations"] == [] and "restarts" not in other.data["extra"]  # another run: fresh record


# Not a credential: a key of the length W&B accepts (40 characters), for a server that is not there.
FAKE_WANDB_KEY = "not-a-real-key-" + "x" * 25


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # waits out W&B's own network timeout
def test_wandb_online_without_network_runs_offline_with_one_warning(tmp_path):
    """WANDB_API_KEY set, server unreachable, wandb.mode=online: the run finishes, logged offline."""
    import subprocess

    from cli_util import RUN

    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    env.update(WANDB_API_KEY=FAKE_WANDB_KEY,
               WANDB_BASE_URL=f"http://127.0.0.1:{_closed_port()}")
    args = ["model=gpt2", "data=synthetic", "train.batch_size=2", "data.block_size=32", "train.iterations=3",
            "train.progress=false", "data.eval_batches=1", "wandb.mode=online", "wandb.init_timeout_s=60",
            f"hydra.run.dir={run_dir}"]
    out = subprocess.run([*RUN, *args], env=env, capture_output=True, text=True, timeout=400)
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-3000:]
    assert load_record(run_dir)["status"] == "completed"
    warnings = [line for line in output.splitlines() if "wandb.mode=online: " in line]
    assert len(warnings) == 1 and "unreachable" in warnings[0] and "logging offline" in warnings[0], output[-3000:]
    assert list((run_dir / "wandb").glob("offline-run-*")) and not list((run_dir / "wandb").glob("run-*"))


def test_wandb_init_that_hangs_is_bounded_by_init_timeout(tmp_path):
    """A server that accepts connections and never answers: wandb.init gives up within the bound."""
    import subprocess
    import sys

    script = f"""
import json, socket, time
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(64)
import os
os.environ["WANDB_BASE_URL"] = "http://127.0.0.1:%d" % server.getsockname()[1]
from omegaconf import OmegaConf
from dreamddp.run.wandb_log import WandbLogger
cfg = OmegaConf.create({{"wandb": {{"mode": "online", "project": "p", "entity": None, "group": None, "tags": [],
                       "init_timeout_s": 15.0}}, "experiment": {{"name": "e"}}, "algo": {{"name": "ssgd"}}}})
start = time.monotonic()
log = WandbLogger(cfg, {str(tmp_path / "run")!r}, enabled=True)
took = time.monotonic() - start
log.log(0, {{"loss": 1.0}}); log.finish(0)
print(json.dumps({{"mode": log.mode, "took": took}}))
"""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    env["WANDB_API_KEY"] = FAKE_WANDB_KEY
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))
    assert result["mode"] == "offline", out.stderr[-2000:]
    assert result["took"] < 15.0 + 20.0, result  # the bound, with room for a loaded machine
    assert sum("wandb.mode=online: " in line for line in (out.stdout + out.stderr).splitlines()) == 1
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))
