"""Who am I in the job, and the process group built from it.

Two launchers start workers: torchrun (RANK/WORLD_SIZE/LOCAL_RANK/MASTER_*) and
srun (SLURM_PROCID/SLURM_NTASKS/...; no rendezvous, so the master address is the
first node of the step, as SLURM addresses it, and the port is derived from the job
id, identical on all tasks without any communication).  ``worker_env`` only reads the
environment (no torch import) so the CLI can decide cheaply whether it is a
worker; ``init_distributed`` does the real work inside one.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, NoReturn, Optional

from dreamddp import speed
from dreamddp.checks import ConfigError, at_least, choice, positive

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig

CLUSTERS = ("local", "slurm")
DEVICES = ("auto", "cpu", "cuda")
DIST_BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class WorkerEnv:
    launcher: str  # "torchrun" | "srun"
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: Optional[str]  # None: torchrun already exported it
    master_port: Optional[int]  # None: torchrun already exported it / derive from config
    # Which node (torchrun agent / SLURM node) of how many: two agents on one host are two nodes.
    node_rank: int = 0
    nnodes: int = 1


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: "torch.device"
    backend: str  # the torch.distributed backend actually used
    # How this worker shares its host (CPU): local workers, cores, pinning, CPU quota.
    host: dict = field(default_factory=dict)
    # Every rank's {rank, local_rank, node, hostname}, gathered once at start-up, by rank.
    ranks: tuple = ()
    nnodes: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def check(cluster) -> None:
    """The ``cluster.*`` rules (whether this host has CUDA is validate's environment check)."""
    choice("cluster.name", cluster.name, CLUSTERS)
    for key in ("nproc", "nnodes", "threads_per_worker"):
        at_least(f"cluster.{key}", cluster[key], 1)
    if not 0 <= cluster.master_port <= 65535:
        raise ConfigError(f"cluster.master_port={cluster.master_port}: must be 0 (pick a free port) or 1..65535")
    choice("cluster.device", cluster.device, DEVICES)
    choice("cluster.dist_backend", cluster.dist_backend, DIST_BACKENDS)
    if cluster.device == "cpu" and cluster.dist_backend == "nccl":
        raise ConfigError("cluster.dist_backend=nccl: needs cluster.device=cuda (use gloo on cpu)")
    positive("cluster.timeout_s", cluster.timeout_s)
    at_least("cluster.max_restarts", cluster.max_restarts, 0)
    if cluster.cpu_quota is not None:
        at_least("cluster.cpu_quota", cluster.cpu_quota, 0)
    speed.check(cluster)
    check_mesh(cluster)


def check_mesh(cluster) -> None:
    """``cluster.replicas`` x ``cluster.shards`` must tile the world (nproc x nnodes)."""
    world = int(cluster.nproc) * int(cluster.nnodes)
    at_least("cluster.shards", cluster.shards, 1)
    if world % cluster.shards:
        raise ConfigError(f"cluster.shards={cluster.shards}: must divide the world size {world} "
                          f"(cluster.nproc={cluster.nproc} x cluster.nnodes={cluster.nnodes})")
    nproc = int(cluster.nproc)
    if cluster.shards > 1 and cluster.shards % nproc and nproc % cluster.shards:
        raise ConfigError(f"cluster.shards={cluster.shards}: a replica must be part of one node or whole nodes "
                          f"(cluster.nproc={nproc} workers each): its FSDP traffic stays on the fast link")
    if cluster.replicas is not None:
        at_least("cluster.replicas", cluster.replicas, 1)
        if cluster.replicas * cluster.shards != world:
            raise ConfigError(f"cluster.replicas={cluster.replicas}: replicas x shards = "
                              f"{cluster.replicas * cluster.shards}, the world size is {world} "
                              f"(cluster.nproc={cluster.nproc} x cluster.nnodes={cluster.nnodes})")


def mesh_shape(cluster) -> tuple[int, int]:
    """(replicas, shards) of a checked cluster config."""
    world = int(cluster.nproc) * int(cluster.nnodes)
    return world // int(cluster.shards), int(cluster.shards)


def first_host(nodelist: str) -> str:
    """First hostname of a SLURM hostlist such as ``gpu[03-05,9],cpu1`` -> ``gpu03``."""
    m = re.match(r"([^\[,]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise ValueError(f"cannot parse SLURM nodelist {nodelist!r}")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def slurm_node_addr(node: str) -> str:
    """``node`` where it resolves, else the address SLURM itself reaches it at (slurm.conf
    NodeAddr): a cluster whose node names are not DNS names still finds its master."""
    try:
        socket.getaddrinfo(node, None)
        return node
    except (socket.gaierror, UnicodeError):
        pass
    try:
        out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return node
    m = re.search(r"\bNodeAddr=(\S+)", out)
    return m.group(1) if m else node


def check_shared_run_dir(explicit_run_dir: bool, environ: Optional[Mapping[str, str]] = None) -> None:
    """Multi-node torchrun: refuse a run directory that each node would name differently.

    Every node composes its own ``hydra.run.dir``; without ``--rdzv-id`` torchrun's run id is
    "none" and the directory falls back to this node's agent start time (config/resolvers.py
    run_id), so rank 0 would write run.json in one directory and the other nodes their
    checkpoints and failure reports in others."""
    env = os.environ if environ is None else environ
    me = worker_env(env)
    if explicit_run_dir or me is None or me.launcher != "torchrun" or me.nnodes <= 1:
        return
    if env.get("TORCHELASTIC_RUN_ID", "none") != "none" or env.get("SLURM_JOB_ID"):
        return  # torchrun/<rdzv id> or slurm/<job id>: the same on every node
    raise ConfigError(
        f"hydra.run.dir: torchrun --nnodes {me.nnodes} without --rdzv-id gives each node its own run "
        "directory; pass the same --rdzv-id <id> to every node's torchrun (run dir outputs/torchrun/<id>_...) "
        "or hydra.run.dir=<a directory every node can write>")


def worker_env(environ: Optional[Mapping[str, str]] = None) -> Optional[WorkerEnv]:
    """The launcher-provided identity of this process, None when not a worker."""
    env = os.environ if environ is None else environ
    if all(k in env for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return WorkerEnv(
            launcher="torchrun",
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env["LOCAL_RANK"]),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
            master_addr=None,
            master_port=None,
            node_rank=int(env.get("GROUP_RANK", "0")),
            nnodes=int(env.get("GROUP_WORLD_SIZE", "1")),
        )
    ntasks = int(env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1")))
    if "SLURM_PROCID" in env and ntasks > 1:
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE") or "1"
        return WorkerEnv(
            launcher="srun",
            rank=int(env["SLURM_PROCID"]),
            world_size=ntasks,
            local_rank=int(env.get("SLURM_LOCALID", "0")),
            # "4(x2)" -> 4: tasks on the first node, the usual homogeneous case
            local_world_size=int(re.match(r"\d+", per_node).group(0)),
            master_addr=env.get("MASTER_ADDR") or first_host(nodes),
            master_port=int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else None,
            node_rank=int(env.get("SLURM_NODEID", "0")),
            nnodes=int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_JOB_NUM_NODES") or "1"),
        )
    return None


def resolve_device(name: str) -> str:
    """auto -> cuda when available, else cpu."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def nccl_fits(local_workers: int, gpus: int) -> bool:
    """Whether every local worker has a GPU of its own: NCCL refuses two ranks on one device."""
    return local_workers <= gpus


def resolve_backend(name: str, device: str, local_workers: int = 1, gpus: int = 1) -> str:
    """auto -> nccl on cuda when every local worker has a GPU of its own, else gloo (gloo
    all-reduces CUDA tensors through the host)."""
    if name != "auto":
        return name
    return "nccl" if device == "cuda" and nccl_fits(local_workers, gpus) else "gloo"


def process_group_backend(backend: str) -> str:
    """What init_process_group gets: with NCCL, the control path's CPU tensors (flags,
    metrics, per-rank timings) go over gloo in the same group."""
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


def slurm_port(job_id: str) -> int:
    """A port every task of one SLURM job derives alike (range 20000-39999)."""
    return 20000 + int(re.sub(r"\D", "", job_id) or 0) % 20000


def init_distributed(cfg: "DictConfig", environ: Optional[Mapping[str, str]] = None) -> DistContext:
    """Initialise torch.distributed for this worker from the launcher's env.

    Sets the thread count first (one core per worker on CPU), picks the device
    and backend from ``cfg.cluster``, and binds CUDA workers to their local GPU.
    ``cluster.timeout_s`` bounds every collective and barrier of the group: a peer
    that never joins (frozen, or hung elsewhere) makes it fail instead of waiting.
    """
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    env = worker_env(environ)
    if env is None:
        raise RuntimeError("not inside torchrun or srun: start workers with dreamddp-run")
    torch.set_num_threads(int(cfg.cluster.threads_per_worker))
    device_type = resolve_device(str(cfg.cluster.device))
    gpus = torch.cuda.device_count() if device_type == "cuda" else 0
    backend = resolve_backend(str(cfg.cluster.dist_backend), device_type, env.local_world_size, gpus)
    if env.launcher == "srun":
        if not os.environ.get("MASTER_ADDR"):
            os.environ["MASTER_ADDR"] = slurm_node_addr(env.master_addr) if env.master_addr else "127.0.0.1"
        port = env.master_port or int(cfg.cluster.master_port) or slurm_port(
            os.environ.get("SLURM_JOB_ID", "0")
        )
        os.environ.setdefault("MASTER_PORT", str(port))
        os.environ.update(RANK=str(env.rank), WORLD_SIZE=str(env.world_size))
        os.environ.update(LOCAL_RANK=str(env.local_rank))
    if device_type == "cuda":
        device = torch.device("cuda", env.local_rank % gpus)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=process_group_backend(backend), rank=env.rank, world_size=env.world_size,
                            timeout=timedelta(seconds=float(cfg.cluster.timeout_s)))
    ranks = gather_ranks(env)
    host = share_host(cfg.cluster, env) if device_type == "cpu" else {}
    return DistContext(env.rank, env.world_size, env.local_rank, device, backend, host,
                       ranks=ranks, nnodes=len({r["node"] for r in ranks}))


def gather_ranks(env: WorkerEnv) -> tuple:
    """Every rank's place in the job (rank, local rank, node index, hostname), by rank.

    The node index comes from the launcher (torchrun's GROUP_RANK, SLURM_NODEID), not
    from the hostname: two torchrun agents on one host are two nodes.  One collective
    at start-up, so a rank that is not where it should be shows in the run record."""
    import torch.distributed as dist

    mine = {"rank": env.rank, "local_rank": env.local_rank, "node": env.node_rank,
            "hostname": socket.gethostname()}
    everyone: list = [None] * env.world_size
    dist.all_gather_object(everyone, mine)
    return tuple(everyone)


_CPU_GROUP: list = [None]  # this worker's CPU-quota group, released at shutdown


def share_host(cluster, env: WorkerEnv) -> dict:
    """Pin and cap this CPU worker's compute thread as ``cluster.*`` asks (after the process
    group started, so the backend's threads stay free); what was done, for the run record."""
    from dreamddp import cpu_share

    cores = sorted(os.sched_getaffinity(0))
    workers, threads = env.local_world_size, int(cluster.threads_per_worker)
    oversubscribed = workers * threads > len(cores)
    wanted = cluster.pin_cores if cluster.pin_cores is not None else oversubscribed
    pinned = pin_cores(cores, env.local_rank, threads, oversubscribed) if wanted else None
    quota = cpu_share.share(cluster.cpu_quota, workers, threads, len(cores))
    group, note = cpu_share.apply(quota) if quota else (None, "not capped")
    _CPU_GROUP[0] = group
    return {"local_workers": workers, "cores": len(cores), "oversubscribed": oversubscribed,
            "pinned": sorted(pinned) if pinned else None, "cpu_quota": quota if group else None,
            "cpu_quota_note": note}


def pin_cores(cores: list[int], local_rank: int, threads: int, shared: bool) -> set[int]:
    """Pin this (the compute) thread to its ``threads`` of ``cores``: a block of its own, or
    where workers outnumber them (``shared``) round robin, ranks r and r + len(cores) sharing
    core r.  Returns the cores.  Threads started before (gloo's) keep floating over every core."""
    if not shared:
        mine = set(cores[local_rank * threads:(local_rank + 1) * threads])
    else:
        mine = {cores[(local_rank * threads + i) % len(cores)] for i in range(threads)}
    os.sched_setaffinity(0, mine)
    return mine


def shutdown(clean: bool = True) -> None:
    """Barrier, then destroy: no rank tears the group down under another's feet.

    After a failure (``clean=False``) the peers are not where a barrier expects them
    (mid-collective, or dead), so the group is destroyed without one.
    """
    import torch.distributed as dist

    from dreamddp import cpu_share

    if dist.is_available() and dist.is_initialized():
        if clean:
            dist.barrier()
        dist.destroy_process_group()
    cpu_share.release(_CPU_GROUP[0])
    _CPU_GROUP[0] = None


def exit_worker(code: int | str | None = 0) -> NoReturn:
    """End this worker process the way multiprocessing ends its children: flush what it wrote,
    then ``os._exit``, without the interpreter's finalization.  ``code`` as ``sys.exit`` takes
    it: None is 0, anything but an int is printed to stderr and exits 1.

    Why: about one clean S-SGD run in 60 (ResNet-18, 2 gloo workers, after the barrier and
    destroy_process_group, run record complete) had a rank abort in finalization with
    "terminate called without an active exception" and no Python frame left: a torch
    distributed object that outlives destroy_process_group dies with the interpreter, and
    torchrun then fails the whole job.  Nothing of ours runs in finalization (W&B and the
    record are closed explicitly), so skipping it loses nothing.
    """
    import logging
    import sys

    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing left to flush
            pass
    os._exit(code)
