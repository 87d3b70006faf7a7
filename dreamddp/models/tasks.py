"""Training loss and evaluation metrics for the two tasks: image classification and LM.

Batches:
- "image": ``(x, y)`` with x a float tensor (B, C, H, W) and y class ids (B,);
- "lm": a LongTensor (B, T) of token ids; the model predicts token t+1 from
  tokens <= t (transformers shifts the labels), so a batch scores B * (T - 1)
  tokens.

Evaluation averages over all samples (image) or all predicted tokens (lm),
not over batches, so a short last batch is weighted by its size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

TASKS = ("image", "lm")


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"model.task={task}: unknown task; choose from {', '.join(TASKS)}")


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _image_batch(batch, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise ValueError("image batch: expected (inputs, labels)")
    x, y = batch
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def _lm_batch(batch, device: torch.device) -> torch.Tensor:
    if not isinstance(batch, torch.Tensor) or batch.dim() != 2 or batch.shape[1] < 2:
        shape = tuple(batch.shape) if isinstance(batch, torch.Tensor) else type(batch).__name__
        raise ValueError(f"lm batch: expected token ids of shape (B, T >= 2), got {shape}")
    if batch.dtype != torch.long:
        raise ValueError(f"lm batch: expected torch.long token ids, got {batch.dtype}")
    return batch.to(device, non_blocking=True)


def compute_loss(task: str, model: nn.Module, batch) -> torch.Tensor:
    """Mean training loss of one batch (a scalar with a graph for backward)."""
    _check_task(task)
    device = _device(model)
    if task == "image":
        x, y = _image_batch(batch, device)
        return F.cross_entropy(model(x), y)
    ids = _lm_batch(batch, device)
    return model(input_ids=ids, labels=ids).loss


@torch.no_grad()
def evaluate(task: str, model: nn.Module, batches: Iterable) -> dict:
    """Metrics over all batches in eval mode; the model's previous mode is restored.

    image: {"loss", "accuracy"}; lm: {"loss", "perplexity"} (loss per token, nats).
    """
    _check_task(task)
    device = _device(model)
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    try:
        for batch in batches:
            if task == "image":
                x, y = _image_batch(batch, device)
                logits = model(x)
                loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
                correct += int((logits.argmax(dim=1) == y).sum().item())
                count += y.numel()
            else:
                ids = _lm_batch(batch, device)
                tokens = ids.shape[0] * (ids.shape[1] - 1)
                loss_sum += model(input_ids=ids, labels=ids).loss.item() * tokens
                count += tokens
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("evaluate: no batches to evaluate")
    loss = loss_sum / count
    if task == "image":
        return {"loss": loss, "accuracy": correct / count}
    return {"loss": loss, "perplexity": math.exp(loss)}
