"""WikiText-2 (raw), GPT-2 tokenised, train / validation splits.

Sources, first found wins: local files under root in the original release
layout (wikitext-2-raw/wiki.{train,valid}.raw) or the hub repository layout
(wikitext/wikitext-2-raw-v1/{train,validation}-*.parquet); then a token cache
prepare() left from the hub. Workers never download: prepare() does, once."""

from __future__ import annotations

import glob
import os

from dreamddp.data.base import Dataset, DataUnavailable, LoadOptions, TokenSplits
from dreamddp.data.cache import fingerprint, load_array, save_array
from dreamddp.data.probe import hub_offline, reachable
from dreamddp.data.registry import DATASETS
from dreamddp.data.text import tokenize_documents
from dreamddp.data.tokenizer import GPT2_VOCAB_SIZE, tokenizer_fingerprint

_HUB = ("wikitext", "wikitext-2-raw-v1")
_HOST = "huggingface.co"


def local_files(root: str) -> tuple[str, dict[str, list[str]]] | None:
    raw = os.path.join(root, "wikitext-2-raw")
    if all(os.path.isfile(os.path.join(raw, f"wiki.{s}.raw")) for s in ("train", "valid")):
        return "text", {s: [os.path.join(raw, f"wiki.{f}.raw")] for s, f in (("train", "train"), ("validation", "valid"))}
    hub = os.path.join(root, "wikitext", "wikitext-2-raw-v1")
    found = {s: sorted(glob.glob(os.path.join(hub, f"{s}-*.parquet"))) for s in ("train", "validation")}
    if all(found.values()):
        return "parquet", found
    return None


def _cache_paths(root: str, key: str) -> tuple[str, str]:
    base = os.path.join(root, "wikitext2", f"gpt2-{key}")
    return base + "-train.npy", base + "-eval.npy"


def _hub_key() -> str:
    return fingerprint([], *_HUB, tokenizer_fingerprint())


def _tokenize(ds_dict) -> tuple:
    # rows are lines that keep their "\n", so joining them restores the file text
    return tuple(tokenize_documents(["".join(ds_dict[s]["text"])], eos_between=False) for s in ("train", "validation"))


def _cached(root: str, key: str, build) -> TokenSplits:
    paths = _cache_paths(root, key)
    arrays = [load_array(p) for p in paths]
    if any(a is None for a in arrays):
        arrays = build()
        for p, a in zip(paths, arrays):
            save_array(p, a)
    return TokenSplits(arrays[0], arrays[1], GPT2_VOCAB_SIZE)


def _load_local(root: str, kind: str, files: dict[str, list[str]]) -> TokenSplits:
    import datasets

    datasets.disable_progress_bars()
    opts = {"keep_linebreaks": True} if kind == "text" else {}
    key = fingerprint([f for fs in files.values() for f in fs], tokenizer_fingerprint())
    return _cached(root, key, lambda: _tokenize(
        datasets.load_dataset(kind, data_files=files, cache_dir=os.path.join(root, "hf-datasets"), **opts)
    ))


def _has_hub_cache(root: str) -> bool:
    return all(os.path.isfile(p) for p in _cache_paths(root, _hub_key()))


@DATASETS.register
class WikiText2(Dataset):
    """The paper's LM data: local files, else the hub once (prepare), then a token cache."""

    name = "wikitext2"
    task = "lm"
    needs_network = True
    offline_alternative = "shakespeare"

    @classmethod
    def check(cls, root: str) -> None:
        if local_files(root) or _has_hub_cache(root):
            return
        if not hub_offline() and reachable(_HOST):
            return
        raise DataUnavailable(
            f"data={cls.name}: WikiText-2 is not in {root} and the Hugging Face hub cannot be reached "
            f"(offline); use data={cls.offline_alternative}"
        )

    @classmethod
    def load(cls, root: str, options: LoadOptions) -> TokenSplits:
        local = local_files(root)
        if local:
            return _load_local(root, *local)
        if _has_hub_cache(root):
            return _cached(root, _hub_key(), None)
        raise DataUnavailable(f"data={cls.name}: WikiText-2 is not in {root}; run prepare (the launcher does) first")

    @classmethod
    def prepare(cls, root: str) -> None:
        local = local_files(root)
        if local:
            _load_local(root, *local)
            return
        import datasets

        _cached(root, _hub_key(), lambda: _tokenize(
            datasets.load_dataset(*_HUB, cache_dir=os.path.join(root, "hf-datasets"))
        ))
