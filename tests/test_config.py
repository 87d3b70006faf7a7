"""Composition of every group option, the stable keys, precedence, and validation messages."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dreamddp.config import ConfigError, conf_dir, schema, validate
from dreamddp.config.resolvers import rank0_only, run_id

CONF = Path(conf_dir())
GROUPS = ("model", "data", "algo", "bandwidth", "cluster", "experiment")
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))]
# Datasets that need the network the first time (this test machine is offline).
NETWORK_DATA = {"cifar10", "cifar100", "wikitext2"}


def _needs_network(cfg) -> bool:
    from dreamddp.data import check_available

    try:
        check_available(cfg.data.name, cfg.data.root)
    except ValueError:
        return True
    return False


@pytest.mark.parametrize("group,option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes_and_validates(compose_cfg, group, option):
    overrides = [f"{group}={option}"]
    if group == "data" and option in ("cifar10", "cifar100", "fashion_mnist"):
        overrides.append("model=resnet18")  # image data needs an image model
    cfg = compose_cfg(overrides)
    expected_name = {"experiment": cfg.experiment.name}.get(group, option)
    name_key = {"bandwidth": None, "experiment": "experiment.name"}.get(group, f"{group}.name")
    if group == "algo" and cfg.algo.recipe:  # a recipe: an algorithm and stages, named by its recipe
        name_key = "algo.recipe"
    if name_key:
        assert OmegaConf.select(cfg, name_key) == expected_name
    if cfg.data.name in NETWORK_DATA and _needs_network(cfg):
        # data=cifar10 etc., or a paper-scale experiment preset that selects such data
        with pytest.raises(ConfigError, match=f"data={cfg.data.name}"):
            validate(cfg)
    else:
        validate(cfg)


def test_groups_mirror_registries():
    from dreamddp.algorithms import ALGORITHMS
    from dreamddp.data import DATASETS
    from dreamddp.models import MODELS

    assert {p.stem for p in (CONF / "model").glob("*.yaml")} == set(MODELS)
    assert {p.stem for p in (CONF / "data").glob("*.yaml")} == set(DATASETS)
    algos = {p.stem: OmegaConf.load(p) for p in (CONF / "algo").glob("*.yaml")}
    assert {stem for stem, c in algos.items() if not c.get("recipe")} <= set(ALGORITHMS)
    assert all(c.recipe == stem and c.name in ALGORITHMS for stem, c in algos.items() if c.get("recipe"))


def _defaults_comments() -> dict[str, str]:
    """conf/config.yaml's defaults list: group -> its comment, with the comment-only lines under it."""
    comments, group = {}, None
    for line in (CONF / "config.yaml").read_text().split("defaults:\n", 1)[1].splitlines():
        if not line.startswith(" "):
            break  # a blank line or the next top-level key ends the list
        entry, _, comment = line.partition("#")
        if entry.strip().startswith("- "):
            group = entry.strip()[2:].split(":")[0].strip()
            comments[group] = comment
        elif not entry.strip() and group:
            comments[group] += " " + comment
    return comments


def test_config_yaml_comments_list_every_group_option():
    comments = _defaults_comments()
    for group in GROUPS:
        named = set(re.findall(r"[\w.-]+", comments[group]))
        missing = sorted(p.stem for p in (CONF / group).glob("*.yaml") if p.stem not in named)
        assert not missing, f"conf/config.yaml: the {group} comment does not name {missing}"


STABLE_KEYS = {
    "seed": int, "wandb.mode": str, "wandb.project": str, "wandb.entity": type(None),
    "wandb.group": type(None), "wandb.tags": list,
    "model.name": str, "model.size": str, "model.vocab_size": type(None), "model.n_layer": type(None),
    "model.n_embd": type(None), "model.n_head": type(None), "model.n_inner": type(None),
    "model.base_width": type(None), "model.num_blocks": type(None),
    "data.name": str, "data.root": str, "data.block_size": int, "data.eval_fraction": float,
    "data.eval_batches": int, "data.synthetic_size": int,
    "train.iterations": int, "train.batch_size": int, "train.lr": float, "train.optimizer": str,
    "train.momentum": float, "train.weight_decay": float, "train.grad_clip": float,
    "train.lr_schedule": str, "train.warmup_iterations": int, "train.eval_every": int,
    "train.log_every": int, "train.divergence_every": int, "train.progress": bool,
    "algo.name": str, "algo.H": int, "warmup.profile_iterations": int,
    "bandwidth.backend": str, "bandwidth.gbps": type(None), "bandwidth.latency_ms": float,
    "bandwidth.comm_ratio": type(None), "bandwidth.calibration": float,
    "cluster.name": str, "cluster.nproc": int, "cluster.nnodes": int, "cluster.device": str,
    "cluster.dist_backend": str, "cluster.threads_per_worker": int, "cluster.master_port": int,
    "experiment.name": str,
}


def test_stable_keys_and_defaults(compose_cfg):
    cfg = compose_cfg()
    plain = OmegaConf.to_container(cfg, resolve=True)
    for key, typ in STABLE_KEYS.items():
        value = plain
        for part in key.split("."):
            value = value[part]
        assert isinstance(value, list if typ is list else typ), key
    assert (cfg.model.name, cfg.model.size, cfg.algo.name) == ("gpt2", "tiny", "ssgd")
    assert (cfg.bandwidth.backend, cfg.cluster.name, cfg.cluster.nproc) == ("ideal", "local", 2)
    assert cfg.data.name == "shakespeare" and Path(cfg.data.root).is_absolute()
    assert cfg.wandb.mode == "offline"


def test_every_schema_field_has_a_comment():
    source = inspect.getsource(schema).splitlines()
    tree = ast.parse(inspect.getsource(schema))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name != "Config":
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign):
                    above = source[stmt.lineno - 2].strip()
                    assert above.startswith("#"), f"{node.name}.{stmt.target.id} has no comment"


@pytest.mark.parametrize("model,data,optimizer,lr,clip", [
    ("resnet18", "fashion_mnist", "sgd", 0.1, 0.0),
    ("resnet50", "fashion_mnist", "sgd", 0.1, 0.0),
    ("gpt2", "shakespeare", "adam", 1e-3, 1.0),
    ("llama2", "shakespeare", "adam", 1e-3, 1.0),
])
def test_model_yaml_sets_paper_defaults(compose_cfg, model, data, optimizer, lr, clip):
    from dreamddp.models import MODELS

    cfg = compose_cfg([f"model={model}"])
    assert cfg.data.name == data == MODELS[model].default_data
    assert (cfg.train.optimizer, cfg.train.lr, cfg.train.grad_clip) == (optimizer, lr, clip)
    if optimizer == "sgd":
        assert (cfg.train.momentum, cfg.train.weight_decay) == (0.9, 1e-4)


@pytest.mark.parametrize("overrides", [
    ["model=resnet18", "data=synthetic"], ["data=synthetic", "model=resnet18"],
])
def test_explicit_data_wins_over_model_default(compose_cfg, overrides):
    assert compose_cfg(overrides).data.name == "synthetic"


def test_model_default_data_follows_model(compose_cfg):
    assert compose_cfg(["model=resnet50"]).data.name == "fashion_mnist"
    assert compose_cfg(["model=llama2"]).data.name == "shakespeare"


def test_cli_overrides_beat_model_train_defaults(compose_cfg):
    cfg = compose_cfg(["model=resnet18", "train.lr=0.05", "train.optimizer=adamw"])
    assert (cfg.train.lr, cfg.train.optimizer) == (0.05, "adamw")


def test_bandwidth_presets(compose_cfg):
    assert compose_cfg(["bandwidth=1gbit"]).bandwidth.gbps == 1.0
    r7 = compose_cfg(["bandwidth=ratio7"]).bandwidth
    assert (r7.backend, r7.gbps, r7.comm_ratio) == ("emulated", None, 7.0)


def test_schema_refuses_unknown_keys_and_types(compose_cfg):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose_cfg(["train.itrations=5"])
    with pytest.raises(ConfigCompositionException):  # another algorithm's option
        compose_cfg(["algo=flsgd", "algo.bucket_mb=1"])
    with pytest.raises(ConfigCompositionException):
        compose_cfg(["train.iterations=abc"])


BAD = [
    (["cluster.nproc=0"], "cluster.nproc=0: must be >= 1"),
    (["cluster.threads_per_worker=0"], "cluster.threads_per_worker=0: must be >= 1"),
    (["cluster.master_port=70000"], "cluster.master_port=70000"),
    (["cluster.device=tpu"], "cluster.device=tpu: unknown value"),
    (["model.size=huge"], "model.size=huge: unknown size for gpt2; choose from tiny, small, compute, paper"),
    (["model.name=vgg"], "model.name=vgg: unknown model"),
    (["algo.name=nope"], "algo.name=nope: unknown algorithm"),
    (["algo.H=0"], "algo.H=0: must be >= 1"),
    (["algo=ascwfbp", "algo.bucket_mb=0"], "algo.bucket_mb=0.0: must be > 0"),
    (["algo=dear", "algo.bucket_mb=-1"], "algo.bucket_mb=-1.0: must be > 0"),
    (["algo=ddp", "algo.bucket_cap_mb=0"], "algo.bucket_cap_mb=0.0: must be > 0"),
    (["algo=dreamddp", "algo.schedule=/x.json"], "algo.schedule=/x.json: file not found"),
    (["warmup.profile_iterations=0"], "warmup.profile_iterations=0: must be >= 1"),
    (["algo=streaming_diloco", "algo.tau=10"], "algo.tau=10: must be between 0 and algo.H-1=9"),
    (["algo=streaming_diloco", "algo.fragments=11"], "algo.fragments=11: must be between 1 and algo.H=10"),
    (["algo=streaming_diloco", "algo.alpha=1.5"], "algo.alpha=1.5: must be in [0, 1)"),
    (["algo=streaming_diloco", "algo.compress=int8"], "algo.compress=int8: unknown value"),
    (["algo=ssgd", "algo.outer_optimizer=nesterov"], "algo.outer_optimizer=nesterov: algo=ssgd averages gradients"),
    (["algo=desloc", "model=resnet18"], "algo.moments_every=[20, 40]: averages Adam's moments"),
    (["algo=ddp", "bandwidth=1gbit"], "algo=ddp is not paced by the emulated link"),
    (["algo=ddp", "bandwidth=ratio7"], "algo=ddp is not paced by the emulated link"),
    (["train.iterations=0"], "train.iterations=0: must be >= 1"),
    (["train.batch_size=0"], "train.batch_size=0: must be >= 1"),
    (["train.lr=0"], "train.lr=0.0: must be > 0"),
    (["train.optimizer=lion"], "train.optimizer=lion: unknown value"),
    (["train.lr_schedule=linear"], "train.lr_schedule=linear: unknown value"),
    (["train.momentum=1.5"], "train.momentum=1.5"),
    (["train.warmup_iterations=500", "train.iterations=10"], "train.warmup_iterations=500"),
    (["bandwidth.backend=emulated"], "bandwidth.gbps: required for backend emulated (or set bandwidth.comm_ratio)"),
    (["bandwidth=1gbit", "bandwidth.comm_ratio=7"], "not both"),
    (["bandwidth=1gbit", "bandwidth.gbps=-1"], "bandwidth.gbps=-1.0: must be > 0"),
    (["bandwidth.backend=wifi"], "bandwidth.backend=wifi: unknown link"),
    (["data.eval_fraction=1.0"], "data.eval_fraction=1.0"),
    (["data.block_size=1"], "data.block_size=1: must be >= 2"),
    (["data.eval_batches=0"], "data.eval_batches=0: must be >= 1"),
    (["data.block_size=4096"], "data.block_size=4096: exceeds"),
    (["model=resnet18", "data=shakespeare"], "data=shakespeare: serves task=lm, the model needs task=image"),
    (["model=gpt2", "data=fashion_mnist"], "data=fashion_mnist: serves task=image, the model needs task=lm"),
    (["model=resnet18", "model.vocab_size=100"], "model.vocab_size=100: only language models"),
    (["wandb.mode=cloud"], "wandb.mode=cloud: unknown value"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_validation_messages(compose_cfg, overrides, message):
    cfg = compose_cfg(overrides)
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    text = str(info.value)
    assert message in text and "\n" not in text


def test_missing_value_is_named(compose_cfg):
    cfg = compose_cfg()
    cfg.train.lr = "???"  # what a config without a model yaml would leave
    with pytest.raises(ConfigError, match=r"^train.lr: no value set"):
        validate(cfg)


def test_cuda_without_cuda_is_refused(compose_cfg):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    with pytest.raises(ConfigError, match="cluster.device=cuda: CUDA is not available"):
        validate(compose_cfg(["cluster.device=cuda"]))


def test_nccl_with_more_workers_than_gpus_is_refused(compose_cfg, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cfg = compose_cfg(["cluster.device=cuda", "cluster.dist_backend=nccl", "cluster.nproc=2"])
    with pytest.raises(ConfigError, match=r"^cluster.dist_backend=nccl: 2 workers on 1 GPU\(s\).*dist_backend=auto"):
        validate(cfg)


def test_offline_data_is_refused_with_alternative(compose_cfg):
    cfg = compose_cfg(["model=resnet18", "data=cifar10"])
    if not _needs_network(cfg):
        pytest.skip("CIFAR-10 is cached on this host")
    with pytest.raises(ConfigError, match=r"data=cifar10: .*offline.*use data=fashion_mnist"):
        validate(cfg)


def test_run_dir_default_names_algo_and_model(compose_cfg):
    cfg = compose_cfg(["algo=flsgd", "model=resnet18"], hydra=True)
    assert cfg.hydra.run.dir.startswith("outputs/") and cfg.hydra.run.dir.endswith("_flsgd_resnet18")


def test_run_id_comes_from_the_launcher():
    assert run_id({"TORCHELASTIC_RUN_ID": "abc"}) == "torchrun/abc"
    assert run_id({"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0"}) == "slurm/42.0"
    # torchrun without an id: the agent's (parent's) start time, the same for all local ranks
    assert run_id({"TORCHELASTIC_RUN_ID": "none"}) == run_id({"TORCHELASTIC_RUN_ID": "none"})


def test_rank0_only(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(key, raising=False)
    assert rank0_only(".hydra") == ".hydra"
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rank0_only(".hydra") is None
    assert rank0_only("a.log", "/dev/null") == "/dev/null"
