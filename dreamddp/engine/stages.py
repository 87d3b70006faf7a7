"""The sync pipeline's stages as configuration: the ``algo.*`` keys every algorithm has.

An algorithm states its plan (which units sync when, engine/plan.py); every op of it passes
through one pipeline (engine/pipeline.py) whose stages these fields choose:

- payload: what a parameter plan sends, ``auto`` (the parameters averaged in place, or their
  change since the unit's anchor where a codec or an outer step needs it) or ``delta`` (always
  the change); a gradient plan sends gradients; ``moments_every`` adds the inner optimizer's
  state (Adam's two moments, DES-LOC) on periods of its own;
- codec: ``compress`` and its options (engine/codecs.py), with error feedback and its decay;
- reduction: the mean over every worker, or over the workers that sent each index;
- outer step: ``outer_optimizer``, a torch optimizer over each unit's anchor (avg: plain
  averaging);
- timing: ``in_place`` (where the plan completes the op), ``late`` (a unit's outer step lands
  at its next sync, a window later, the local progress made meanwhile kept) or ``eager``
  (arXiv 2502.12996: late, with this worker's fresh change standing in for its stale one).
  The plan's own completion points give the rest: behind the next forward (dreamddp
  ``overlap_forward``), d iterations late (dreamddp ``merge_delay``, streaming_diloco ``tau``).

``check_stages`` refuses, in one line naming the field, every stage the algorithm's plan
cannot take (``Algorithm.syncs``: what its plan sends), before any worker starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from dreamddp.checks import ConfigError, at_least, between, choice, positive
from dreamddp.engine.codecs import check_codec, make_codec

PAYLOADS = ("auto", "delta")
REDUCTIONS = ("mean", "senders")
OUTER_OPTIMIZERS = ("avg", "sgd", "nesterov", "adam", "adamw")
TIMINGS = ("in_place", "late", "eager")
# What a plan sends: grad (gradients every step), param (parameters), none (nothing),
# own (collectives of the algorithm's own making: DeAR's, flsgd_timed's weighted merge)
PLAN_KINDS = ("grad", "param", "none", "own")


@dataclass
class StageConfig:
    # What a parameter plan sends: auto (parameters averaged in place; their change since the
    # unit's anchor where a codec or an outer step needs it) | delta (always the change).
    payload: str = "auto"
    # Codec on the wire: none (fp32, in place) | fp16 | bf16 | topk | quant | e3m0 (4-bit) |
    # dct (DeMo's DCT then top-k); compressed payloads are all-gathered and summed in fp32.
    compress: str = "none"
    # topk, dct: the fraction kept (of the tensor, or of each chunk).
    compress_ratio: float = 0.01
    # topk, dct: elements per chunk, each keeping its own top fraction (0: the whole tensor; dct needs > 0).
    compress_chunk: int = 0
    # quant: bits per value (2, 4, 8: 2**bits levels); topk: bits per kept value (16: fp16);
    # 0: the codec's default (quant 4, topk 16).
    compress_bits: int = 0
    # quant, e3m0: elements per scale (e3m0: 0 = one scale per payload).
    compress_block: int = 1024
    # Keep what each payload did not carry and add it, times error_decay, to the next one of
    # the same elements (e <- v - decode(encode(v)), v = x + error_decay * e).
    error_feedback: bool = True
    error_decay: float = 1.0
    # mean (over every worker) | senders (sparse codecs: over the workers that sent each index).
    reduction: str = "mean"
    # The outer step on each unit's anchor with the mean change as its gradient: avg (the
    # anchor becomes the average; no anchor at all when nothing else needs one) | sgd |
    # nesterov | adam | adamw (torch.optim, state per unit, in checkpoints).
    outer_optimizer: str = "avg"
    # Outer learning rate; momentum: SGD's momentum, Adam's beta1 (DiLoCo: 0.7, 0.9).
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    # in_place | late (one sync late, local progress kept) | eager (late, arXiv 2502.12996).
    timing: str = "in_place"
    # DES-LOC: every this many iterations average the inner optimizer's first and second
    # moments (Adam's exp_avg, exp_avg_sq) after its step; 0 = never.
    moments_every: list[int] = field(default_factory=lambda: [0, 0])


DEFAULTS = StageConfig()
STAGE_KEYS = tuple(f.name for f in fields(StageConfig))
CODEC_KEYS = ("compress_ratio", "compress_chunk", "compress_bits", "compress_block", "error_feedback", "error_decay")


def codec_args(cfg) -> tuple:
    bits = cfg.compress_bits or (16 if cfg.compress == "topk" else 4)
    return cfg.compress, cfg.compress_ratio, cfg.compress_chunk, bits, cfg.compress_block


def codec_of(cfg):
    """The codec ``algo.compress`` names (None: fp32, in place)."""
    return make_codec(*codec_args(cfg))


def anchored(cfg) -> bool:
    """Whether parameter syncs send each unit's change since its anchor (and keep the anchor)."""
    return (cfg.payload == "delta" or cfg.compress != "none" or cfg.outer_optimizer != "avg"
            or cfg.timing == "eager")


def chosen(cfg) -> list[str]:
    """The stage keys set away from the plain pipeline (codec options count with their codec)."""
    keys = [k for k in STAGE_KEYS if k not in CODEC_KEYS and getattr(cfg, k) != getattr(DEFAULTS, k)]
    if list(cfg.moments_every) == [0, 0]:
        keys = [k for k in keys if k != "moments_every"]
    return keys


def check_stages(cfg, name: str, syncs: str, *, fixed_timing: str | None = None) -> None:
    """The stages' own ranges, then what ``algo=name``'s plan (it ``syncs`` grad | param | none
    | own) cannot take; ``fixed_timing``: why the plan's own timing rules out late/eager."""
    choice("algo.payload", cfg.payload, PAYLOADS)
    check_codec(*codec_args(cfg))
    between("algo.error_decay", cfg.error_decay, 0, 1, open_low=True)
    choice("algo.reduction", cfg.reduction, REDUCTIONS)
    choice("algo.outer_optimizer", cfg.outer_optimizer, OUTER_OPTIMIZERS)
    positive("algo.outer_lr", cfg.outer_lr)
    between("algo.outer_momentum", cfg.outer_momentum, 0, 1, open_high=True)
    choice("algo.timing", cfg.timing, TIMINGS)
    if len(cfg.moments_every) != 2:
        raise ConfigError(f"algo.moments_every={list(cfg.moments_every)}: two periods (first and second moment)")
    for k in cfg.moments_every:
        at_least("algo.moments_every", k, 0)
    if cfg.reduction == "senders" and cfg.compress not in ("topk", "dct"):
        raise ConfigError(f"algo.reduction=senders: needs a sparse codec (algo.compress=topk or dct), "
                          f"not algo.compress={cfg.compress}")
    keys = chosen(cfg)
    if not keys:
        return
    key = keys[0]
    value = f"algo.{key}={getattr(cfg, key)}"
    if syncs == "none":
        raise ConfigError(f"{value}: algo={name} syncs nothing, so no sync stage applies")
    if syncs == "own":
        raise ConfigError(f"{value}: algo={name} runs collectives of its own making; the sync stages do not apply")
    if syncs == "grad":
        for k in ("payload", "outer_optimizer", "timing", "moments_every"):
            if k in keys:
                raise ConfigError(f"algo.{k}={getattr(cfg, k)}: algo={name} averages gradients every step; "
                                  "this stage needs a plan that syncs parameters (flsgd, plsgd_enp, dreamddp, ...)")
    if fixed_timing and cfg.timing != "in_place":
        raise ConfigError(f"algo.timing={cfg.timing}: not with algo={name}: {fixed_timing}")
