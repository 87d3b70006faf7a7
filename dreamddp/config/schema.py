"""Typed schema of every run's configuration, registered in Hydra's ConfigStore.

The yaml under ``conf/`` only picks values; these dataclasses fix which keys
exist and their types, so a typo (``train.itrations=5``) or a wrong type
(``train.iterations=abc``) is refused by Hydra while composing, before any
worker starts.  Key names are a stable interface: run records, results tools
and runners read them.  The ``algo`` node is typed by the chosen algorithm's
own Config (declared in its module; each conf/algo yaml lists
``/schema/algo/<name>`` first), so one algorithm's options cannot be set on another.
Ranges live with each component (its ``check``), cross-field rules in
``validate.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from dreamddp.algorithms import ALGORITHMS, AlgoConfig

# Name under which the top-level schema is stored; conf/config.yaml lists it first
# in its defaults so that every yaml merges into the typed structure.
SCHEMA_NAME = "dreamddp_schema"


@dataclass
class WandbConfig:
    # offline|online|disabled; the WANDB_MODE environment variable wins over it.
    mode: str = "offline"
    # W&B project that runs are logged to.
    project: str = "dreamddp"
    # W&B entity (user or team); None = the account's default entity.
    entity: Optional[str] = None
    # Run group; None = experiment.name, so one experiment's runs sit together.
    group: Optional[str] = None
    # Free-form tags attached to the W&B run.
    tags: list[str] = field(default_factory=list)
    # online only: seconds to wait for the W&B server at start-up (a reachability probe,
    # then wandb.init); past it the run logs offline, with one warning line.
    init_timeout_s: float = 30.0


@dataclass
class ModelConfig:
    # Registry name in dreamddp.models.MODELS: resnet18|resnet50|gpt2|llama2.
    name: str = MISSING
    # tiny (tests) | small (CPU-sized, the paper models' byte distribution) | compute (CPU-sized
    # with a GPU-like forward/backward/step split: make bench) | paper (the paper's
    # architecture); the model yaml's recipe (batch, lr, ...) follows it.
    size: str = "tiny"
    # Dimensions over the size preset (dreamddp/models/dims.py); None = the preset's value.
    # A key the model does not take is refused.
    # Language models only: vocabulary size; None = the model preset's own.
    vocab_size: Optional[int] = None
    # GPT-2, Llama: transformer blocks (Llama: num_hidden_layers).
    n_layer: Optional[int] = None
    # GPT-2, Llama: hidden width (Llama: hidden_size); a multiple of n_head.
    n_embd: Optional[int] = None
    # GPT-2, Llama: attention heads (Llama: num_attention_heads = num_key_value_heads);
    # Llama's rotary embedding needs an even n_embd / n_head.
    n_head: Optional[int] = None
    # GPT-2, Llama: MLP width (Llama: intermediate_size); None = the preset's (GPT-2: 4 * n_embd).
    n_inner: Optional[int] = None
    # ResNets: width of the first stage (stages are 1, 2, 4, 8 times it).
    base_width: Optional[int] = None
    # ResNets: blocks per stage, 4 integers (ResNet-18: [2,2,2,2], ResNet-50: [3,4,6,3]).
    num_blocks: Optional[list[int]] = None


@dataclass
class DataConfig:
    # Registry name in dreamddp.data.DATASETS, e.g. fashion_mnist, shakespeare.
    name: str = MISSING
    # Where datasets and caches live (absolute); env DREAMDDP_DATA overrides the default.
    root: str = "${oc.env:DREAMDDP_DATA,${ddp_repo:}/data_cache}"
    # Tokens per language-model sample (context length); must fit the model's positions.
    block_size: int = 128
    # Fraction of the training split held out for evaluation when a dataset has no test split.
    eval_fraction: float = 0.05
    # Number of evaluation batches per evaluation (bounds eval cost on CPU).
    eval_batches: int = 8
    # Number of samples the synthetic dataset generates.
    synthetic_size: int = 4096


@dataclass
class TrainConfig:
    # Training iterations (optimizer steps) per worker.
    iterations: int = 100
    # Samples per worker per iteration (global batch = batch_size * world size).
    batch_size: int = 8
    # Peak learning rate; each model yaml sets its paper default.
    lr: float = MISSING
    # sgd|adam|adamw; each model yaml sets its paper default.
    optimizer: str = MISSING
    # SGD momentum (ignored by adam/adamw).
    momentum: float = 0.9
    # Weight decay (L2 for sgd/adam, decoupled for adamw).
    weight_decay: float = 0.0
    # Clip the global gradient norm to this value; 0 = off.
    grad_clip: float = 0.0
    # float32 matrix products (torch.set_float32_matmul_precision): highest = full fp32;
    # high = TF32 on CUDA matrix units (what GPU training runs use); medium = bf16 passes.
    matmul_precision: str = "highest"
    # constant|cosine|step learning-rate schedule after warm-up.
    lr_schedule: str = "cosine"
    # Iterations of linear warm-up from 0 to lr.
    warmup_iterations: int = 0
    # Evaluate every this many iterations; 0 = only at the end.
    eval_every: int = 50
    # Log (record + W&B + console) every this many iterations.
    log_every: int = 10
    # Measure cross-worker parameter divergence every this many iterations; 0 = off.
    divergence_every: int = 0
    # Show a tqdm progress bar on rank 0.
    progress: bool = True
    # Save every worker's full state every this many iterations, and after the
    # last one, to <run dir>/checkpoints/step-<N>/; 0 = never.
    checkpoint_every: int = 0
    # Keep the newest this many complete checkpoints; 0 = keep all.
    checkpoint_keep: int = 2
    # Resume from a checkpoint: a step-<N> directory, or a run / checkpoints
    # directory (its newest complete checkpoint); training continues at iteration
    # N up to train.iterations.  None = start from scratch.
    resume: Optional[str] = None


@dataclass
class BandwidthConfig:
    # ideal (no pacing) | emulated (virtual-clock link model) | tc (kernel shaping).
    backend: str = "ideal"
    # Link bandwidth in Gbit/s (emulated, tc); None with emulated needs comm_ratio.
    gbps: Optional[float] = None
    # One-way latency per message in milliseconds.
    latency_ms: float = 0.0
    # emulated: set gbps at start-up so that (all-reduce time of all parameters) /
    # (backward time) = comm_ratio; the paper's GPT-2 regime is about 7.
    comm_ratio: Optional[float] = None
    # Multiplies the modelled transfer time (protocol/header overhead).
    calibration: float = 1.0
    # emulated, tc: one uplink rate in Gbit/s per worker (cluster.nproc x cluster.nnodes of
    # them), e.g. [1, 1, 1, 0.25] for one slow worker; a ring collective goes at the slowest
    # uplink's pace (tc: the kernel shapes each; emulated: paced at min(worker_gbps)).
    # None = every worker at gbps, which stays the nominal rate in the run record.
    worker_gbps: Optional[list[float]] = None
    # How the real collectives carry the bytes under a paced link: eager (started at
    # launch) | deferred (started at the first wait, adjacent all-reduces merged: on CPU,
    # gloo gets no cycles while the workers compute) | step (deferred, and what is still
    # queued when an iteration ends starts then, merged: a late average, merge_delay,
    # gets the next iteration as slack for the slowest rank) | auto (for the emulated link
    # on CPU: step where the algorithm merges averages late, e.g. algo.merge_delay,
    # algo.overlap_forward (awaited in the next forward) or Streaming DiLoCo's tau, else
    # deferred; eager otherwise). The link model's timing is the same either way.
    carrier: str = "auto"
    # While a worker waits for the paced link: true = it keeps its core (polls and yields),
    # as a worker waiting for the network keeps its GPU | false = it sleeps, lending the
    # core to other workers on the host, which then compute faster | null (auto) = true
    # for the emulated link on CPU when worker threads outnumber cores and no CPU quota
    # (cluster.cpu_quota) keeps each worker to its share already.
    hold_core: Optional[bool] = None


@dataclass
class SlowSpellConfig:
    # Probability that a block of cluster.slow_spell.length iterations is a slow spell, drawn per
    # worker and block from (seed, rank, block) alone (a resumed run draws the same); 0 = never.
    p: float = 0.0
    # A spell's speed factor is drawn uniformly in [speed_min, speed_max], each in (0, 1]: the
    # worker's forward and backward take 1/factor times as long (on top of cluster.worker_speed).
    speed_min: float = 0.5
    # Upper end of the spell's speed factor (speed_min <= speed_max <= 1).
    speed_max: float = 0.5
    # Iterations a spell lasts (iterations are drawn in blocks of this many).
    length: int = 1
    # Seed of the spells' draws (independent of the run's seed, so data and spells vary apart).
    seed: int = 0


@dataclass
class ClusterConfig:
    # local (this host starts its workers via torchrun) | slurm (srun/submitit start them).
    name: str = "local"
    # Workers per node.
    nproc: int = 2
    # Nodes; the local launcher supports 1, multi-node runs use slurm/ scripts.
    nnodes: int = 1
    # auto|cpu|cuda; auto = cuda when available, else cpu.
    device: str = "auto"
    # auto|gloo|nccl; auto = nccl when each worker has a GPU of its own, else gloo (CPU,
    # or workers sharing a GPU: gloo all-reduces CUDA tensors through the host).
    dist_backend: str = "auto"
    # torch intra-op threads (and OMP_NUM_THREADS) per worker.
    threads_per_worker: int = 1
    # Pin each CPU worker's compute thread to its own cores (workers sharing cores share
    # them in fixed pairs, round robin), after the process group's threads have started
    # (they float). null (auto) = pin CPU workers on a host with more worker threads
    # than cores, where the kernel's load balancer otherwise leaves one worker a core
    # to itself and three others one between them, now and then.
    pin_cores: Optional[bool] = None
    # Cores each CPU worker's compute thread may use (a CFS quota, root and cgroup v1 cpu
    # controller; 0 = no cap). null (auto) = cores / workers when worker threads outnumber
    # cores: a worker that waits then cannot lend its core to the others (dreamddp/cpu_share.py).
    cpu_quota: Optional[float] = None
    # Rendezvous port; 0 = pick a free port (local) or derive one from the SLURM job id.
    master_port: int = 0
    # Process-group timeout in seconds: a collective or barrier that a peer does not
    # join within it (a hung or frozen worker) fails, and the job ends.
    timeout_s: float = 300.0
    # torchrun restarts of the whole worker group after a worker fails; restarted
    # workers resume from the newest complete checkpoint in the run directory.
    max_restarts: int = 0
    # Checkpoint-and-stop on request (SIGUSR1, or <run dir>/checkpoint-request): the
    # workers agree on it every iteration, save a checkpoint and stop ("preempted").
    preemptible: bool = False
    # One compute speed per worker (cluster.nproc x cluster.nnodes of them), each in (0, 1]:
    # 0.5 = twice as slow; the trainer waits (1/speed - 1) x each measured forward and backward
    # (dreamddp/speed.py). None = every worker at 1.
    worker_speed: Optional[list[float]] = None
    # Random slow spells on top of worker_speed (dreamddp/speed.py); p=0 = none.
    slow_spell: SlowSpellConfig = field(default_factory=SlowSpellConfig)
    # The 2-D device mesh, replicas x shards (dreamddp/engine/mesh.py): replicas are the
    # sites across the slow link (partial sync, the link's pacing), shards the ranks inside
    # one replica that hold the model with torch's FSDP2 (fully_shard, per unit, then the
    # root; their own collectives unpaced).  replicas x shards = nproc x nnodes, and
    # rank = replica * shards + shard.  shards=1: no sharding (one worker per replica).
    shards: int = 1
    # Replicas; null = world size / shards (given, replicas x shards must be the world size).
    replicas: Optional[int] = None


@dataclass
class WarmupConfig:
    # Passes timed by the start-up profile (per-unit forward, backward and all-reduce
    # times on the live job) that DreamDDP's scheduler plans from; as many again run
    # with per-unit forward hooks, plus two dropped ones.
    profile_iterations: int = 10
    # Every other run on the engine profiles this many passes at start-up the same way, and
    # the simulator predicts its iteration time from that profile and its plan before it
    # trains (one line at start, summary.predicted, the error per iteration). 0: no prediction.
    predict_iterations: int = 3


@dataclass
class ExperimentConfig:
    # Experiment name: W&B group by default and the label results tools group runs by.
    name: str = "default"


@dataclass
class Config:
    # Global random seed (model init, data order); worker rank is mixed in where needed.
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)  # typed per algorithm: see register_schema
    bandwidth: BandwidthConfig = field(default_factory=BandwidthConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)


def register_schema() -> None:
    """Store the schema so conf/config.yaml can list it first in its defaults, and each
    registered algorithm's Config as ``schema/algo/<name>`` (package ``algo``), which its
    conf/algo yaml lists first."""
    cs = ConfigStore.instance()
    cs.store(name=SCHEMA_NAME, node=Config)
    for name, cls in ALGORITHMS.items():
        cs.store(group="schema/algo", name=name, node=cls.Config, package="algo")
