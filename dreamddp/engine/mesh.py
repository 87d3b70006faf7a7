"""The 2-D device mesh (replicas x shards) and the model's FSDP2 sharding over it.

Replicas are the sites across the slow link, where partial sync runs (the engine's
communicator is the ``replicate`` process group, the one the link paces); shards are
the ranks inside one replica holding the model with torch's FSDP2 (``fully_shard``
over the ``shard`` dimension, whose all-gathers and reduce-scatters are unpaced: the
fast link inside a site).  rank = replica * shards + shard, so a replica is a block
of consecutive ranks (one node group).

Each unit (a module owning parameters, engine/units.py) is its own FSDP group, then
the root takes the rest; a unit whose parameter another module also uses (GPT-2's
tied embedding and LM head) is left to the root's group, where FSDP keeps the tie.
With shards=1 nothing is sharded: the model stays as it is, today's path.

The engine then works on each rank's LOCAL shards: ``bind_local`` moves an FSDP
parameter's padded local shard (FSDP's ``_sharded_param_data``, the all-gather's
input) into the engine's flat buffer in place and points its gradient (a DTensor)
at the flat gradient buffer, into which FSDP's reduce-scatter accumulates.  Those two
fields are FSDP2's own (torch 2.13, ``FSDPParam.reset_sharded_param`` documents the
first); tests/test_mesh.py checks the training trajectory against plain FSDP2.  FSDP2
runs a sharded parameter's post-accumulate-grad hooks once its reduce-scatter output
has landed in ``.grad``, so the engine's unit-ready launches still come unit by unit.
"""

from __future__ import annotations

import torch
from torch import nn

REPLICATE, SHARD = "replicate", "shard"


def build_mesh(replicas: int, shards: int, device_type: str = "cpu"):
    """The (replicate, shard) DeviceMesh over the default process group (world = R x S)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if replicas * shards != world:
        raise ValueError(f"mesh: replicas x shards = {replicas} x {shards} = {replicas * shards}, "
                         f"the world size is {world}")
    return init_device_mesh(device_type, (replicas, shards), mesh_dim_names=(REPLICATE, SHARD))


def is_mesh(obj) -> bool:
    from torch.distributed.device_mesh import DeviceMesh

    return isinstance(obj, DeviceMesh)


def check_mesh(mesh) -> None:
    if mesh.ndim != 2 or tuple(mesh.mesh_dim_names or ()) != (REPLICATE, SHARD):
        raise ValueError(f"mesh: a 2-D DeviceMesh with dims ({REPLICATE!r}, {SHARD!r}) "
                         f"(dreamddp.engine.mesh.build_mesh), got dims {mesh.mesh_dim_names}")


def replicate_group(mesh):
    """The process group partial sync runs over: this rank's shard in every replica (None,
    the default group, without a mesh)."""
    return None if mesh is None else mesh.get_group(REPLICATE)


def shard_for_run(cluster, device: torch.device, model: nn.Module, units: list) -> tuple:
    """The trainer's mesh and units: with ``cluster.shards`` > 1 the mesh is built, the model
    sharded, and the units re-read from it in ``units``' (measured) order; else (None, units),
    the path without a mesh."""
    from dreamddp.engine.units import enumerate_units, reorder_units

    if int(cluster.shards) == 1:
        return None, units
    import torch.distributed as dist

    shards = int(cluster.shards)
    mesh = build_mesh(dist.get_world_size() // shards, shards, device.type)
    shard_model(model, mesh)
    return mesh, reorder_units(enumerate_units(model), [u.name for u in units])


def shards_of(mesh) -> int:
    return mesh.size(mesh.mesh_dim_names.index(SHARD))


def _tied(model: nn.Module) -> set[int]:
    """ids of parameters registered on more than one module."""
    seen: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            seen[id(p)] = seen.get(id(p), 0) + 1
    return {k for k, n in seen.items() if n > 1}


def shard_model(model: nn.Module, mesh) -> nn.Module:
    """``model`` sharded with FSDP2 over the mesh's shard dimension, per unit then the root;
    unchanged with one shard.  Call it before building the optimizer (the parameters
    become DTensors)."""
    check_mesh(mesh)
    if shards_of(mesh) == 1:
        return model
    return _fully_shard_units(model, mesh[SHARD])


def hsdp(model: nn.Module, mesh) -> nn.Module:
    """torch's HSDP on the same mesh (fully_shard on both dimensions, per unit then the
    root): S-SGD's reference on replicas x shards."""
    return _fully_shard_units(model, mesh)


def _fully_shard_units(model: nn.Module, mesh) -> nn.Module:
    """``fully_shard`` each unit not tied to another module (the root keeps a tie), then the root."""
    from torch.distributed.fsdp import fully_shard

    from dreamddp.engine.units import enumerate_units

    tied = _tied(model)
    for unit in enumerate_units(model):
        module = model.get_submodule(unit.name)
        if module is not model and not any(id(p) in tied for p in module.parameters()):
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def fsdp_params(model: nn.Module) -> dict:
    """id(sharded parameter) -> its FSDPParam, for every fully_shard'ed module of ``model``."""
    from torch.distributed.fsdp import FSDPModule

    found = {}
    for module in model.modules():
        if isinstance(module, FSDPModule):
            for group in module._get_fsdp_state()._fsdp_param_groups:
                for fp in group.fsdp_params:
                    found[id(fp.sharded_param)] = fp
    return found


def local_numel(fsdp_param) -> int:
    """Elements of this rank's padded local shard (what the all-gather sends, and partial sync)."""
    return fsdp_param.padded_sharded_param_size.numel()


def bind_local(fsdp_param, param_region: torch.Tensor, grad_region: torch.Tensor) -> torch.Tensor:
    """Move the padded local shard into ``param_region`` (1-D, ``local_numel`` long) and make
    the gradient a DTensor over ``grad_region``; returns that gradient (to re-attach)."""
    from torch.distributed.tensor import DTensor

    p = fsdp_param.sharded_param
    if fsdp_param.fsdp_placement.dim != 0:
        raise ValueError(f"{fsdp_param._param_fqn}: sharded on dim {fsdp_param.fsdp_placement.dim}; "
                         "the engine binds dim-0 shards (fully_shard's default)")
    padded = fsdp_param.padded_sharded_param_size
    length = p._local_tensor.size(0) if p._local_tensor.numel() > 0 else 0
    with torch.no_grad():
        param_region.copy_(fsdp_param._sharded_param_data)
        grad_region.zero_()
    fsdp_param._sharded_param_data = param_region  # the all-gather's input: FSDP reads it here
    p._local_tensor = param_region.view(padded).narrow(0, 0, length)
    grad = DTensor.from_local(grad_region.view(padded).narrow(0, 0, length), p.device_mesh, p.placements,
                              run_check=False, shape=p.shape, stride=p.stride())
    p.grad = grad
    return grad


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (a plain tensor: itself)."""
    from torch.distributed.tensor import DTensor

    return t._local_tensor if isinstance(t, DTensor) else t


def rank_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict:
    """What this rank holds of the model: its parameters' bytes (a sharded parameter: its
    local shard, unpadded) and, given the optimizer, the tensors of its state (momentum,
    Adam's moments: shards too).  R x S = 2 x 2 holds about half the unsharded bytes."""
    params = sum(local_tensor(p).numel() * p.element_size() for p in model.parameters())
    out = {"param_bytes": params}
    if optimizer is not None:
        out["optimizer_bytes"] = sum(local_tensor(v).numel() * v.element_size()
                                     for state in optimizer.state.values() for v in state.values()
                                     if torch.is_tensor(v) and v.dim())
    return out
