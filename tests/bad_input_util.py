"""What the bad-input catalogues (test_bad_input.py, test_bad_input_files.py) share."""

from __future__ import annotations

from pathlib import Path

from dreamddp.run.checkpoint import save, step_dir

SYNTH = ["model=gpt2", "data=synthetic", "train.batch_size=2", "cluster.nproc=2", "train.iterations=10"]


def one_line(exc: BaseException, start: str, end: str = "") -> None:
    """The refusal is one line that starts with ``start`` (and ends with ``end``)."""
    text = str(exc)
    assert text.startswith(start) and text.endswith(end) and "\n" not in text, text


def checkpoint(tmp_path: Path, world: int = 2, **run) -> Path:
    """A complete checkpoint of ``world`` workers at step 3 (empty states), its meta updated by ``run``."""
    meta = {"model.name": "gpt2", "model.size": "tiny", "algo.name": "ssgd", "data.name": "synthetic",
            "seed": 0, "train.batch_size": 2, "world_size": world, **run}
    for rank in range(world):
        save(str(tmp_path / "a"), 3, rank, {}, meta, keep=0)
    return step_dir(tmp_path / "a", 3)
