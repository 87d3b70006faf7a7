"""Model registry: presets, units, and names against the DreamDDP authors' profiles.

References nobody here wrote: torchvision's ResNets (same weights -> same
outputs), transformers' default GPT2Config (parameter count), torch's
cross-entropy (losses), and the leaf-module names in the authors' published
profiles (reference/official-profiles).
"""

from __future__ import annotations

import functools
import glob
import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dreamddp import _compat  # noqa: F401  (before torchvision / transformers)
from dreamddp.engine.units import leaf_module_names
from dreamddp.models import (
    MODELS, SIZES, build_model, compute_loss, evaluate, max_positions, model_units,
)
from dreamddp.models import transformers_lm
from dreamddp.schedule.compare import reference_root

PROFILES = reference_root()
OUTPUT_UNIT = {"resnet18": "linear", "resnet50": "linear", "gpt2": "transformer.ln_f",
               "llama2": "lm_head"}
INPUT_UNIT = {"resnet18": "conv1", "resnet50": "conv1", "gpt2": "transformer.wte",
              "llama2": "model.embed_tokens"}


@functools.lru_cache(maxsize=None)
def paper_model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return build_model(name, "paper")


def tiny(name: str, seed: int = 0, **kw) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(name, "tiny", **kw)


def sample_batch(name: str, batch: int = 8, seq: int = 16):
    g = torch.Generator().manual_seed(1)
    if MODELS[name].task == "image":
        classes = MODELS[name].sizes["tiny"]["num_classes"]
        y = torch.randint(classes, (batch,), generator=g)
        return torch.randn(batch, 3, 32, 32, generator=g), y
    return torch.randint(MODELS[name].sizes["tiny"]["vocab_size"], (2, seq), generator=g)


def profile_keys(pattern: str) -> list[list[str]]:
    files = sorted(glob.glob(str(PROFILES / pattern)))
    assert files, pattern
    return [list(json.loads(Path(f).read_text())) for f in files]


def test_registry_contents():
    assert SIZES == ("tiny", "small", "compute", "paper")
    assert {n: (s.task, s.default_data) for n, s in MODELS.items()} == {
        "resnet18": ("image", "fashion_mnist"), "resnet50": ("image", "fashion_mnist"),
        "gpt2": ("lm", "shakespeare"), "llama2": ("lm", "shakespeare")}
    assert all(s.name == n and set(s.sizes) == set(SIZES) for n, s in MODELS.items())
    assert [max_positions(n, s) for n in MODELS for s in SIZES] == [
        None] * 8 + [128, 128, 128, 1024, 128, 128, 128, 764]


@pytest.mark.parametrize("name, size, kw, message", [
    ("vgg", "tiny", {}, "model.name=vgg: unknown model; choose from resnet18, resnet50, gpt2, llama2"),
    ("resnet18", "huge", {}, "model.size=huge: unknown size for resnet18; choose from tiny, small, compute, paper"),
    ("gpt2", "tiny", {"block_size": 129}, "data.block_size=129: exceeds the 128 positions of gpt2"),
    ("llama2", "tiny", {"block_size": 0}, "data.block_size=0: must be a positive integer"),
    ("resnet18", "tiny", {"block_size": 32}, "data.block_size=32: not used by resnet18"),
    ("gpt2", "tiny", {"num_classes": 10}, "data.num_classes=10: not used by gpt2"),
    ("resnet50", "tiny", {"num_classes": 0}, "data.num_classes=0: must be a positive"),
    ("llama2", "tiny", {"vocab_size": 2.5}, "data.vocab_size=2.5: must be a positive"),
])
def test_bad_input_names_the_field(name, size, kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_model(name, size, **kw)
    if not kw:
        with pytest.raises(ValueError, match=re.escape(message)):
            max_positions(name, size)


def test_overrides_and_defaults():
    assert tiny("resnet18").linear.out_features == 10
    assert tiny("resnet50").linear.out_features == 100
    assert tiny("resnet18", num_classes=7).linear.out_features == 7
    gpt2 = tiny("gpt2", vocab_size=300, block_size=128)
    assert gpt2.transformer.wte.num_embeddings == 300 and gpt2.lm_head.out_features == 300
    assert gpt2.config.n_positions == 128
    assert tiny("llama2").lm_head.out_features == 8192  # tiny: frequency-truncated vocabulary
    assert tiny("llama2", vocab_size=500).model.embed_tokens.num_embeddings == 500


@pytest.mark.parametrize("name", list(MODELS))
def test_tiny_forward_backward(name):
    model = tiny(name)
    loss = compute_loss(MODELS[name].task, model, sample_batch(name))
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", list(MODELS))
def test_seeded_builds_are_identical(name):
    a, b, c = tiny(name, seed=0), tiny(name, seed=0), tiny(name, seed=1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


@pytest.mark.parametrize("name, size", [(n, s) for n in MODELS for s in SIZES])
def test_units_partition_parameters_in_backward_order(name, size):
    model = paper_model(name) if size == "paper" else tiny(name)
    units = model_units(model)
    assert [u.index for u in units] == list(range(len(units)))
    assert units[0].name == OUTPUT_UNIT[name] and units[-1].name == INPUT_UNIT[name]
    # Backward order = reverse registration order of the owning modules.
    order = [n for n, _ in model.named_modules()]
    assert [order.index(u.name) for u in units] == sorted(
        (order.index(u.name) for u in units), reverse=True)
    owned = [id(p) for u in units for p in u.params]
    assert len(owned) == len(set(owned))
    assert set(owned) == {id(p) for p in model.parameters()}
    assert sum(u.numel for u in units) == sum(p.numel() for p in model.parameters())
    assert all(u.name in dict(model.named_modules()) for u in units)


def test_gpt2_tied_head_is_owned_by_wte():
    model = tiny("gpt2")
    assert model.lm_head.weight is model.transformer.wte.weight
    units = {u.name: u for u in model_units(model)}
    assert "lm_head" not in units
    assert units["transformer.wte"].params == (model.transformer.wte.weight,)


def test_parameter_counts_of_paper_presets():
    from transformers import GPT2Config

    gpt2 = paper_model("gpt2")
    reference = GPT2Config().to_dict()
    arch = ["n_layer", "n_embd", "n_head", "n_positions", "vocab_size", "n_inner",
            "activation_function", "resid_pdrop", "embd_pdrop", "attn_pdrop",
            "layer_norm_epsilon", "tie_word_embeddings"]
    assert {k: gpt2.config.to_dict()[k] for k in arch} == {k: reference[k] for k in arch}
    # model.parameters() yields the tied wte/lm_head weight once.
    assert sum(p.numel() for p in gpt2.parameters()) == 124_439_808
    assert sum(p.numel() for p in paper_model("resnet18").parameters()) == 11_173_962
    # Llama: embeddings + untied head, per layer 4 attention + 3 MLP matrices + 2 norms.
    v, h, i, layers = 32000, 512, 11008, 8  # the authors' cut-down Llama-2: 176.4M
    expected = 2 * v * h + layers * (4 * h * h + 3 * h * i + 2 * h) + h
    assert sum(p.numel() for p in paper_model("llama2").parameters()) == expected == 176_431_616


def _torchvision_cifar(name: str, num_classes: int) -> nn.Module:
    import torchvision

    net = getattr(torchvision.models, name)(num_classes=num_classes)
    net.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()
    return net


@pytest.mark.parametrize("name, classes", [("resnet18", 10), ("resnet50", 100)])
def test_paper_resnets_equal_torchvision_with_cifar_stem(name, classes):
    ours = build_model(name, "paper")  # fresh: its weights are overwritten below
    ref = _torchvision_cifar(name, classes)
    renamed = {re.sub(r"^fc\.", "linear.", k.replace(".downsample.", ".shortcut.")): v
               for k, v in ref.state_dict().items()}
    assert renamed.keys() == ours.state_dict().keys()
    assert all(renamed[k].shape == v.shape for k, v in ours.state_dict().items())
    ours.load_state_dict(renamed)
    x = torch.randn(2, 3, 32, 32)
    ours.train(), ref.train()
    torch.testing.assert_close(ours(x), ref(x))  # batch statistics
    ours.eval(), ref.eval()
    torch.testing.assert_close(ours(x), ref(x))  # running statistics, updated identically
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_resnet_names_match_authors_profiles(name):
    # Every published resnet profile (3 GPUs x bp/comm) lists the same leaves.
    theirs = profile_keys(f"paper-v1/*/{name}/*.json")
    model = paper_model(name)
    assert all(keys == leaf_module_names(model) for keys in theirs)
    # Units: their leaves minus the identity shortcuts (empty, parameter-free).
    expected = [k for k in theirs[0] if not k.endswith(".shortcut")]
    assert [u.name for u in model_units(model)] == expected[::-1]


def test_gpt2_names_match_authors_profiles():
    model = paper_model("gpt2")
    theirs = profile_keys("artifact/gpt2/*/*/[bc]*.json") + profile_keys("paper-v1/*/gpt2/*.json")
    assert len(theirs) == 12
    assert all(keys == leaf_module_names(model) for keys in theirs)
    comm = json.loads((PROFILES / "artifact/gpt2/8/10gbit/comm.json").read_text())
    # Units: their leaves minus dropout / activation leaves, and minus lm_head,
    # whose weight is wte's (the authors' profile times it as a separate
    # all-reduce of the same 38.6M values as wte).
    free = re.compile(r"(drop|attn_dropout|resid_dropout|mlp\.act|mlp\.dropout)$")
    expected = [k for k in comm if not free.search(k) and k != "lm_head"]
    assert [u.name for u in model_units(model)] == expected[::-1]
    assert comm["lm_head"] == pytest.approx(comm["transformer.wte"], rel=0.1)


def test_llama2_names_match_authors_profiles():
    model = paper_model("llama2")
    ours = leaf_module_names(model)
    # A800 / H100 profiles come from a transformers with one model-level
    # rotary embedding, as ours; the A6000 / artifact ones have one per layer.
    new = profile_keys("paper-v1/A800/llama2/*.json") + profile_keys("paper-v1/H100/llama2/*.json")
    assert all(keys == ours for keys in new)
    old = profile_keys("paper-v1/A6000/llama2/*.json")
    old += profile_keys("artifact/llama2-124M/*/*/[bc]*.json")
    rotary = re.compile(r"^model\.layers\.\d+\.self_attn\.rotary_emb$")
    for keys in old:
        assert [k for k in keys if not rotary.match(k)] == [
            k for k in ours if k != "model.rotary_emb"]
    expected = [k for k in old[0] if not re.search(r"(rotary_emb|act_fn)$", k)]
    assert [u.name for u in model_units(model)] == expected[::-1]


@pytest.mark.parametrize("name", ["gpt2", "llama2"])
def test_sdpa_attention_matches_eager(name, monkeypatch):
    sdpa = tiny(name).eval()
    monkeypatch.setattr(transformers_lm, "ATTN_IMPLEMENTATION", "eager")
    eager = tiny(name).eval()
    assert (sdpa.config._attn_implementation, eager.config._attn_implementation) == (
        "sdpa", "eager")
    ids = sample_batch(name)
    torch.testing.assert_close(sdpa(input_ids=ids).logits, eager(input_ids=ids).logits)


def test_image_loss_and_evaluate_match_torch():
    model = tiny("resnet18")
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(n, 3, 32, 32, generator=g), torch.randint(10, (n,), generator=g))
               for n in (5, 3)]
    model.train()
    x0, y0 = batches[0]
    loss = compute_loss("image", model, (x0, y0))
    torch.testing.assert_close(loss, F.cross_entropy(model(x0), y0))
    result = evaluate("image", model, batches)
    assert model.training
    model.eval()
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    with torch.no_grad():
        logits = model(x)
    assert result["loss"] == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-5)
    assert result["accuracy"] == (logits.argmax(1) == y).float().mean().item()
    evaluate("image", model, batches)
    assert not model.training


def test_lm_loss_and_evaluate_match_torch():
    model = tiny("llama2", vocab_size=50)
    g = torch.Generator().manual_seed(2)
    batches = [torch.randint(50, (n, 9), generator=g) for n in (3, 1)]
    model.eval()

    def shifted_ce(ids, reduction="mean"):
        logits = model(input_ids=ids).logits[:, :-1]
        return F.cross_entropy(logits.reshape(-1, 50), ids[:, 1:].reshape(-1), reduction=reduction)

    torch.testing.assert_close(compute_loss("lm", model, batches[0]), shifted_ce(batches[0]))
    model.train()
    result = evaluate("lm", model, batches)
    assert model.training
    model.eval()
    with torch.no_grad():
        total = sum(shifted_ce(b, "sum").item() for b in batches)
    assert result["loss"] == pytest.approx(total / (4 * 8), rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(result["loss"]))


def test_task_input_errors():
    model = tiny("llama2", vocab_size=50)
    with pytest.raises(ValueError, match="model.task=text: unknown task; choose from image, lm"):
        compute_loss("text", model, torch.zeros(2, 4, dtype=torch.long))
    shape_error = "lm batch: expected token ids of shape (B, T >= 2), got (4,)"
    with pytest.raises(ValueError, match=re.escape(shape_error)):
        compute_loss("lm", model, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="lm batch: expected torch.long"):
        compute_loss("lm", model, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="evaluate: no batches"):
        evaluate("lm", model, [])
    with pytest.raises(ValueError, match=re.escape("image batch: expected (inputs, labels)")):
        compute_loss("image", tiny("resnet18"), torch.zeros(2, 3, 32, 32))


def _byte_shares(name: str, size: str) -> dict[str, float]:
    with torch.device("meta"):
        units = model_units(build_model(name, size))
    total = sum(u.numel for u in units)
    return {u.name: u.numel / total for u in units}


@pytest.mark.parametrize("name, embedding", [("gpt2", ("transformer.wte", "transformer.wpe")),
                                             ("llama2", ("model.embed_tokens", "lm_head"))])
def test_small_lm_keeps_the_paper_models_share_of_bytes_in_embeddings(name, embedding):
    small, paper = _byte_shares(name, "small"), _byte_shares(name, "paper")
    share = lambda s: sum(s[u] for u in embedding)  # noqa: E731
    assert abs(share(small) - share(paper)) < 0.01, (share(small), share(paper))  # GPT-2 31%, Llama-2 19%
    assert len(small) == len(paper)  # same layers


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_small_resnet_keeps_every_layers_share_of_bytes(name):
    small, paper = _byte_shares(name, "small"), _byte_shares(name, "paper")
    assert list(small) == list(paper)
    assert max(abs(small[u] - paper[u]) for u in paper) < 0.01  # within 1 point per layer
