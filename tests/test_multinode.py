"""Two nodes on one host: two torchrun agents meeting through a c10d rendezvous.

What a user types on each node of a cluster (README, "On a cluster"), with both
"nodes" on 127.0.0.1: ``torchrun --nnodes 2 --nproc-per-node N --rdzv-backend c10d
--rdzv-endpoint HOST:PORT --rdzv-id ID -m dreamddp.cli ...``.  One run record,
written by rank 0, with every rank's node and hostname; replicas that agree
where the algorithm says they must (S-SGD: bitwise, every rank's checkpoint;
DreamDDP: each unit right after its average, read back from the checkpoints
through SGD's momentum buffer); a node that dies ends the job on the other with
the record failed; and two nodes that would name different run directories are
refused before any of them trains.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from dreamddp.checks import ConfigError
from dreamddp.run.dist_env import check_shared_run_dir, worker_env
from dreamddp.run.launch import free_port

TINY = ["model=gpt2", "model.size=tiny", "data=synthetic", "train.batch_size=2", "data.block_size=32",
        "train.eval_every=0", "data.eval_batches=1", "train.progress=false", "cluster.threads_per_worker=1"]


def _agent_cmd(nproc: int, port: int, rdzv_id: str | None, args: list[str], rdzv_conf: str | None = None):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", str(nproc),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    cmd += ["--rdzv-id", rdzv_id] if rdzv_id else []
    cmd += ["--rdzv-conf", rdzv_conf] if rdzv_conf else []
    return cmd + ["-m", "dreamddp.cli", "cluster.nnodes=2", f"cluster.nproc={nproc}", *args]


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (torchrun's workers run in sessions of their own)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += _children(p)
    return found


def _kill_tree(pids: list[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def two_nodes(tmp_path: Path, cmds: list[list[str]], cwd: Path | None = None):
    """Start one agent per command (node 0 first); on exit nothing of either is left running."""
    logs = [open(tmp_path / f"node{n}.log", "w") for n in range(len(cmds))]
    agents = [subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
              for cmd, log in zip(cmds, logs)]
    try:
        yield agents
    finally:
        for a in agents:
            _kill_tree(_tree(a.pid))
            a.wait(timeout=30)
        for log in logs:
            log.close()


def _wait_all(tmp_path: Path, agents, timeout: float = 180) -> None:
    for n, a in enumerate(agents):
        try:
            rc = a.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
        assert rc == 0, f"node {n}: {rc}\n" + (tmp_path / f"node{n}.log").read_text()[-3000:]


def _check_ranks(rec: dict, nproc: int) -> None:
    extra = rec["extra"]
    assert extra["world_size"] == 2 * nproc and extra["nnodes"] == 2
    assert extra["ranks"] == [{"rank": r, "local_rank": r % nproc, "node": r // nproc,
                               "hostname": socket.gethostname()} for r in range(2 * nproc)]


def test_ssgd_two_nodes_of_two_one_run_dir_and_bitwise_equal_replicas(tmp_path):
    """The run directory comes from --rdzv-id, the same on both nodes: one record, one checkpoint
    holding all four workers' files, and S-SGD's replicas bitwise equal on both nodes."""
    args = [*TINY, "algo=ssgd", "train.iterations=4", "train.checkpoint_every=4"]
    port = free_port()
    cmds = [_agent_cmd(2, port, "mn-ssgd", args) for _ in range(2)]
    with two_nodes(tmp_path, cmds, cwd=tmp_path) as agents:
        _wait_all(tmp_path, agents)
    (run_dir,) = (tmp_path / "outputs" / "torchrun").iterdir()  # both nodes wrote into one directory
    assert run_dir.name == "mn-ssgd_ssgd_gpt2"
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "completed", rec["error"]
    _check_ranks(rec, nproc=2)
    ckpt = run_dir / "checkpoints" / "step-0000004"
    states = [torch.load(ckpt / f"rank{r:05d}.pt", weights_only=True) for r in range(4)]
    for r, state in enumerate(states[1:], 1):
        for name, tensor in states[0]["model"].items():
            assert torch.equal(state["model"][name], tensor), f"rank {r} differs from rank 0 in {name}"
        for index, slots in states[0]["optimizer"]["state"].items():
            for key, value in slots.items():
                assert torch.equal(state["optimizer"]["state"][index][key], value), (r, index, key)


def _params_by_name(state: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """name -> (parameter, SGD momentum buffer); a tied weight (lm_head = wte) once, as the optimizer has it."""
    seen, names = set(), []
    for name, tensor in state["model"].items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            names.append(name)
    slots = state["optimizer"]["state"]
    assert len(names) == len(slots), (names, len(slots))  # parameters in model.parameters() order
    return {name: (state["model"][name], slots[i]["momentum_buffer"]) for i, name in enumerate(names)}


@pytest.mark.slow  # the S-SGD two-node case covers the launch
def test_dreamddp_two_nodes_units_agree_right_after_their_average(tmp_path):
    """DreamDDP across two nodes: each unit's parameters are averaged in the iterations the profiled
    schedule gives it, before the local step.  With SGD (momentum buffer b, constant lr) a unit averaged
    in the last iteration holds p = avg - lr * b on every replica, so p + lr * b must agree across nodes
    (to rounding) while p itself differs (each node trained on its own shard).  The last two
    checkpoints cover both iterations of an H = 2 window, so every unit is checked."""
    lr, H, T = 0.05, 2, 6
    run_dir = tmp_path / "run"
    args = [*TINY, "algo=dreamddp", f"algo.H={H}", "warmup.profile_iterations=3", f"train.iterations={T}",
            "train.optimizer=sgd", "train.momentum=0.9", f"train.lr={lr}", "train.lr_schedule=constant",
            "train.weight_decay=0", "train.checkpoint_every=1", "train.checkpoint_keep=2",
            f"hydra.run.dir={run_dir}"]
    port = free_port()
    with two_nodes(tmp_path, [_agent_cmd(1, port, "mn-dreamddp", args) for _ in range(2)]) as agents:
        _wait_all(tmp_path, agents)
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "completed", rec["error"]
    _check_ranks(rec, nproc=1)
    schedule = rec["extra"]["schedule"]["schedule"]  # unit -> iterations of the window it averages in
    assert rec["extra"]["schedule"]["H"] == H
    by_step = {}
    for step in (T - 1, T):  # the checkpoint after iteration step - 1, at position (step - 1) % H
        ckpt = run_dir / "checkpoints" / f"step-{step:07d}"
        by_step[step] = [_params_by_name(torch.load(ckpt / f"rank{r:05d}.pt", weights_only=True)) for r in (0, 1)]
    checked, apart, unsynced_differ = set(), 0.0, False
    for step, (mine, theirs) in by_step.items():
        for name, (p0, b0) in mine.items():
            unit = name.rpartition(".")[0]
            p1, b1 = theirs[name]
            gap = (p0 + lr * b0 - (p1 + lr * b1)).abs().max().item()
            if (step - 1) % H in schedule[unit]:
                assert gap < 1e-6, f"{unit} averaged in iteration {step - 1}, yet replicas differ by {gap}"
                checked.add(unit)
                apart = max(apart, (p0 - p1).abs().max().item())
            elif gap > 1e-4:
                unsynced_differ = True
    assert checked == set(schedule), set(schedule) - checked
    assert apart > 1e-4, "replicas identical: the nodes did not train on their own shards"
    assert unsynced_differ, "a unit not averaged in an iteration agreed anyway: the check cannot tell"


def test_a_dead_node_ends_the_job_on_the_other_within_the_timeout(tmp_path):
    """SIGKILL one node's torchrun agent and its worker mid-training: the other node's job ends within
    cluster.timeout_s, and rank 0 (on the surviving node) closes the record as failed.  The survivor
    hosts the rendezvous store (is_host=1), as the first node of a SLURM job does: where the store's
    node dies, the survivor's agent fails at once and SIGTERMs its worker before that can close the
    record, which slurm/dreamddp.sbatch then marks failed (tests/test_slurm.py)."""
    timeout_s = 15
    run_dir = tmp_path / "run"
    args = [*TINY, "algo=plsgd_enp", "algo.H=2", "train.iterations=2000", "bandwidth=1gbit",
            "bandwidth.gbps=0.05", f"cluster.timeout_s={timeout_s}", f"hydra.run.dir={run_dir}"]
    port = free_port()
    # Ranks follow the agents' process ids: the survivor, started first, is rank 0 and writes the record.
    cmds = [_agent_cmd(1, port, "mn-dead", args, "is_host=1"), _agent_cmd(1, port, "mn-dead", args, "is_host=0")]
    with two_nodes(tmp_path, cmds) as (survivor, victim):
        deadline = time.monotonic() + 120
        while True:  # training: the set-up is on record
            try:
                if "units" in json.loads((run_dir / "run.json").read_text())["extra"]:
                    break
            except (OSError, ValueError, KeyError):
                pass
            assert survivor.poll() is None and victim.poll() is None, (tmp_path / "node1.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "node0.log").read_text()[-3000:]
            time.sleep(0.2)
        victim_tree = _tree(victim.pid)
        ranks = {worker_env(_environ(p)).rank for p in victim_tree[1:] if worker_env(_environ(p))}
        assert ranks == {1}, ranks
        _kill_tree(victim_tree)
        killed = time.monotonic()
        rc = survivor.wait(timeout=timeout_s + 60)
        took = time.monotonic() - killed
    assert rc != 0
    assert took < timeout_s, f"the surviving node took {took:.1f} s to end (cluster.timeout_s={timeout_s})"
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "failed" and rec["error"].startswith("rank 0: "), rec["error"]
    assert len(rec["iterations"]) < 2000  # stopped in training, not at its end


def _environ(pid: int) -> dict:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def test_nodes_without_a_shared_run_id_are_refused_in_one_line(tmp_path):
    """No --rdzv-id and no hydra.run.dir: each node would time-stamp its own run directory."""
    port = free_port()
    args = [*TINY, "algo=ssgd", "train.iterations=2"]
    with two_nodes(tmp_path, [_agent_cmd(1, port, None, args) for _ in range(2)], cwd=tmp_path) as agents:
        rcs = [a.wait(timeout=120) for a in agents]
    assert all(rc != 0 for rc in rcs)
    for n in range(2):
        errors = [line for line in (tmp_path / f"node{n}.log").read_text().splitlines() if line.startswith("error: ")]
        assert errors and all("--rdzv-id" in e and "hydra.run.dir=" in e for e in errors), errors
    assert not (tmp_path / "outputs").exists()  # refused before Hydra made a run directory


@pytest.mark.parametrize("environ, explicit, refused", [
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_WORLD_SIZE": "2",
      "TORCHELASTIC_RUN_ID": "none"}, False, True),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_WORLD_SIZE": "2",
      "TORCHELASTIC_RUN_ID": "none"}, True, False),                      # hydra.run.dir given
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_WORLD_SIZE": "2",
      "TORCHELASTIC_RUN_ID": "job7"}, False, False),                     # --rdzv-id job7
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_WORLD_SIZE": "2",
      "TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "42"}, False, False),  # outputs/slurm/42...
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_WORLD_SIZE": "1",
      "TORCHELASTIC_RUN_ID": "none"}, False, False),                     # one node: one agent's clock
    ({}, False, False),                                                  # not a worker
])
def test_shared_run_dir_rule(environ, explicit, refused):
    if refused:
        with pytest.raises(ConfigError, match=r"^hydra.run.dir: torchrun --nnodes 2 without --rdzv-id"):
            check_shared_run_dir(explicit, environ)
    else:
        check_shared_run_dir(explicit, environ)


def test_node_index_from_the_launcher():
    torchrun = worker_env({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                           "GROUP_RANK": "2", "GROUP_WORLD_SIZE": "4"})
    assert (torchrun.node_rank, torchrun.nnodes) == (2, 4)
    srun = worker_env({"SLURM_PROCID": "9", "SLURM_NTASKS": "32", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
                       "SLURM_STEP_NUM_NODES": "4", "SLURM_STEP_TASKS_PER_NODE": "8(x4)",
                       "SLURM_STEP_NODELIST": "gpu[01-04]"})
    assert (srun.node_rank, srun.nnodes, srun.local_world_size, srun.master_addr) == (1, 4, 8, "gpu01")
