"""Flat parameter and gradient buffers laid out in backward unit order.

Every parameter becomes a view into one flat buffer, and every gradient a view
into a second one, both ordered by unit in backward order.  A run of
consecutive units is then one contiguous slice: a bucket, a PLSGD group or a
single unit is synchronised with ONE in-place collective on model memory.
Moving the parameters happens once at set-up; the old storage is released, so
steady-state memory is the model plus its gradients, as without the engine.

On CUDA each parameter starts on a 512-byte boundary, as a tensor of its own
from the caching allocator would: CUDA kernels pick vectorised paths (cuDNN its
algorithms) by a pointer's alignment.  Packed, on an H200 with deterministic
kernels, ResNet-18 behind the engine (60 of its 62 parameters 8 bytes off a
16-byte boundary, after the head's 10-element bias) trained to parameters 3e-1
away from the bare model's, where ResNet-50 (every size a multiple of 4) came
out bitwise equal (results/gpu/README.md, run 6); aligned, ResNet-18 came out
bitwise equal too, under nosync and under DreamDDP (run 7).  The padding is
zero in both buffers, so a collective over a run of units carries it
unchanged; on the CPU, whose kernels gave the same bits packed, there is none.

Given the model, parameters FSDP2 shards (engine/mesh.py) are laid out by their padded
LOCAL shard: the flat buffers hold this rank's shards, FSDP all-gathers from them and
reduce-scatters into them, and a run of units is still one slice (of shards).
"""

from __future__ import annotations

import torch

from dreamddp.engine.units import Unit, param_dtype


CUDA_ALIGN_BYTES = 512  # the CUDA caching allocator's block size: where a tensor of its own starts


def default_align_bytes(device: torch.device) -> int:
    return CUDA_ALIGN_BYTES if device.type == "cuda" else 0


class FlatModel:
    """Owns the flat buffers and the unit -> slice map (``align_bytes``: where each parameter may
    start, 0 for packed; default by device, above)."""

    def __init__(self, units: list[Unit], align_bytes: int | None = None, model=None):
        from dreamddp.engine import mesh

        self.units = units
        sharded = mesh.fsdp_params(model) if model is not None else {}
        dtype = param_dtype(units)
        device = units[0].params[0].device
        if align_bytes is None:
            align_bytes = default_align_bytes(device)
        step = max(1, align_bytes // torch.empty((), dtype=dtype).element_size())
        aligned = lambda n: -(-n // step) * step  # noqa: E731  (the first aligned element at or after n)
        starts, pos = [], 0  # each parameter's element offset, in backward unit order
        self.offsets = []
        for u in units:
            self.offsets.append(aligned(pos))
            for p in u.params:
                pos = aligned(pos)
                starts.append(pos)
                fp = sharded.get(id(p))
                pos += p.numel() if fp is None else mesh.local_numel(fp)
        self.offsets.append(aligned(pos))
        self.params = torch.zeros(self.offsets[-1], dtype=dtype, device=device)
        self.grads = torch.zeros(self.offsets[-1], dtype=dtype, device=device)
        self._all_params = [p for u in units for p in u.params]
        # (parameter, its gradient's view of the flat buffer): re-attached where zero_grad dropped it
        self.grad_views: list[tuple[torch.Tensor, torch.Tensor]] = []
        with torch.no_grad():
            for p, at in zip(self._all_params, starts):
                fp = sharded.get(id(p))
                if fp is not None:
                    n = mesh.local_numel(fp)
                    grad = mesh.bind_local(fp, self.params[at : at + n], self.grads[at : at + n])
                    self.grad_views.append((p, grad))
                    continue
                n = p.numel()
                self.params[at : at + n].copy_(p.detach().reshape(-1))
                p.data = self.params[at : at + n].view_as(p)
                p.grad = self.grads[at : at + n].view_as(p)
                self.grad_views.append((p, p.grad))

    @property
    def unit_spans(self) -> tuple[int, ...]:
        """Each unit's span in the buffers, in elements (its parameters and the padding after them)."""
        return tuple(b - a for a, b in zip(self.offsets, self.offsets[1:]))

    @property
    def unit_nbytes(self) -> tuple[int, ...]:
        """``unit_spans`` in bytes."""
        return tuple(n * self.params.element_size() for n in self.unit_spans)

    def span(self, first: int, last: int) -> tuple[int, int]:
        return self.offsets[first], self.offsets[last + 1]

    def param_slice(self, first: int, last: int) -> torch.Tensor:
        a, b = self.span(first, last)
        return self.params[a:b]

    def grad_slice(self, first: int, last: int) -> torch.Tensor:
        a, b = self.span(first, last)
        return self.grads[a:b]

    def zero_grads(self) -> None:
        # Autograd accumulates into an existing .grad in place (no grad mode
        # during backward), so the views stay attached as long as nobody calls
        # optimizer.zero_grad(set_to_none=True); the engine owns zeroing.
        self.grads.zero_()

    def grads_attached(self) -> bool:
        """True when every parameter's .grad is still a view of the flat buffer."""
        from dreamddp.engine.mesh import local_tensor

        base = self.grads.untyped_storage().data_ptr()
        return all(p.grad is not None and local_tensor(p.grad).untyped_storage().data_ptr() == base
                   for p in self._all_params)

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_ semantics on the flat buffer, in one op; the total norm
        as a 0-d tensor, as torch returns it (reading it on the host would wait for the device)."""
        total = torch.linalg.vector_norm(self.grads)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        self.grads.mul_(coef)
        return total
