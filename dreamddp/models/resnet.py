"""CIFAR-style ResNets whose module names match the DreamDDP authors' profiles.

The authors profile and schedule ResNets by leaf-module name (``conv1``,
``layer2.0.shortcut.0``, ``linear`` ...; see
reference/official-profiles/paper-v1/*/resnet18/bp.json), so this module
registers exactly those names, in the same order:

- stem: 3x3 conv, stride 1, padding 1 (32x32 inputs), no max-pool;
- each block owns ``shortcut``: an empty ``nn.Sequential`` for the identity
  (a parameter-free leaf that appears in the authors' profiles) or
  ``Sequential(1x1 conv, BatchNorm)`` when the shape changes;
- activations and pooling are functional, so they are not leaves (the
  authors' profiles list none);
- the classifier is ``linear``.

With width 64 these are torchvision's ResNet-18/50 (v1.5: stride on the 3x3
conv of a bottleneck) with the CIFAR stem; tests check that against
torchvision itself.  Initialisation is PyTorch's module default, as in the
authors' code; BatchNorm running statistics are buffers, not parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dreamddp.checks import ConfigError


def _shortcut(in_planes: int, out_planes: int, stride: int) -> nn.Sequential:
    if stride == 1 and in_planes == out_planes:
        return nn.Sequential()  # identity, kept as a module for the authors' names
    return nn.Sequential(
        nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False),
        nn.BatchNorm2d(out_planes),
    )


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = _shortcut(in_planes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out_planes = planes * self.expansion
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        self.shortcut = _shortcut(in_planes, out_planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.shortcut(x))


BLOCKS: dict[str, type[nn.Module]] = {"basic": BasicBlock, "bottleneck": Bottleneck}


class CifarResNet(nn.Module):
    """Four stages of ``num_blocks[i]`` blocks, widths base_width * (1, 2, 4, 8)."""

    def __init__(
        self, block: str, num_blocks: tuple[int, ...], base_width: int, num_classes: int
    ) -> None:
        super().__init__()
        if block not in BLOCKS:
            raise ValueError(f"model.block={block}: unknown block; choose from {', '.join(BLOCKS)}")
        if len(num_blocks) != 4 or min(num_blocks) < 1:
            raise ValueError(f"model.num_blocks={num_blocks}: need four stages of >= 1 block")
        cls = BLOCKS[block]
        self.num_blocks, self.base_width = tuple(num_blocks), base_width
        self.conv1 = nn.Conv2d(3, base_width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(base_width)
        in_planes = base_width
        for stage, n in enumerate(num_blocks):
            planes = base_width * 2**stage
            blocks = []
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(cls(in_planes, planes, stride))
                in_planes = planes * cls.expansion
            self.add_module(f"layer{stage + 1}", nn.Sequential(*blocks))
        self.linear = nn.Linear(in_planes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


def build_resnet(
    *, block: str, num_blocks: tuple[int, ...], base_width: int, num_classes: int
) -> CifarResNet:
    return CifarResNet(block, tuple(num_blocks), base_width, num_classes)


def check_resnet(dims: dict, given) -> None:
    """A ResNet's rules on its resolved dimensions (preset + ``given``): four stages."""
    blocks = dims["num_blocks"]
    if len(blocks) != 4 or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in blocks):
        raise ConfigError(f"model.num_blocks={list(blocks)}: must be 4 integers >= 1 (blocks per stage)")


def resnet_dims(model: CifarResNet) -> dict:
    """The ``model.*`` dimensions of a built ResNet."""
    return {"base_width": model.base_width, "num_blocks": list(model.num_blocks)}
