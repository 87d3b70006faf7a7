"""Flat parameter and gradient buffers laid out in backward unit order.

Every parameter becomes a view into one flat buffer, and every gradient a view
into a second one, both ordered by unit in backward order.  A run of
consecutive units is then one contiguous slice: a bucket, a PLSGD group or a
single unit is synchronised with ONE in-place collective on model memory.
Moving the parameters happens once at set-up; the old storage is released, so
steady-state memory is the model plus its gradients, as without the engine.
"""

from __future__ import annotations

import torch

from dreamddp.engine.units import Unit, param_dtype


class FlatModel:
    """Owns the flat buffers and the unit -> slice map."""

    def __init__(self, units: list[Unit]):
        self.units = units
        dtype = param_dtype(units)
        device = units[0].params[0].device
        self.offsets = [0]
        for u in units:
            self.offsets.append(self.offsets[-1] + u.numel)
        self.params = torch.empty(self.offsets[-1], dtype=dtype, device=device)
        self.grads = torch.zeros(self.offsets[-1], dtype=dtype, device=device)
        with torch.no_grad():
            for u in units:
                pos = self.offsets[u.index]
                for p in u.params:
                    n = p.numel()
                    self.params[pos : pos + n].copy_(p.detach().reshape(-1))
                    p.data = self.params[pos : pos + n].view_as(p)
                    p.grad = self.grads[pos : pos + n].view_as(p)
                    pos += n
        self._all_params = [p for u in units for p in u.params]

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
        base = self.grads.untyped_storage().data_ptr()
        return all(p.grad is not None and p.grad.untyped_storage().data_ptr() == base for p in self._all_params)

    def clip_grad_norm_(self, max_norm: float) -> float:
        """torch.nn.utils.clip_grad_norm_ semantics on the flat buffer, in one op."""
        total = torch.linalg.vector_norm(self.grads)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        self.grads.mul_(coef)
        return float(total)
