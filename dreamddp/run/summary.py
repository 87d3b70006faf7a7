"""End-of-run summary and the rank-0 progress bar."""

from __future__ import annotations

import resource
import statistics

from tqdm import tqdm


def warmup_cut(n: int) -> int:
    """Iterations excluded from timing means: the first 10%, at least 1, at most 10."""
    return min(10, max(1, n // 10)) if n > 1 else 0


def summarise(record, cfg, world_size: int) -> dict:
    rows = record.data["iterations"]
    timed = rows[warmup_cut(len(rows)) :] or rows

    def mean(key: str) -> float:
        return statistics.fmean(r[key] for r in timed)

    it_time = mean("time")
    samples = cfg.train.batch_size * world_size
    summary = {
        "algorithm": cfg.algo.name,
        "model": f"{cfg.model.name}/{cfg.model.size}",
        "data": cfg.data.name,
        "workers": world_size,
        "iterations": len(rows),
        "timed_iterations": len(timed),
        "mean_iteration_time": it_time,
        "mean_forward": mean("forward"),
        "mean_backward": mean("backward"),
        "mean_wait": mean("wait"),
        "bytes_per_iteration": mean("bytes"),
        "samples_per_second": samples / it_time if it_time > 0 else None,
        "final_loss": rows[-1]["loss"],
        "final_eval": record.data["evals"][-1] if record.data["evals"] else None,
        "train_time": sum(r["time"] for r in rows),  # training iterations only (no eval, no warm-up passes)
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # rank 0's process (Linux: KiB)
        "peak_gpu_mib": _peak_gpu_mib(),
    }
    summary["text"] = render(summary)
    return summary


def _peak_gpu_mib() -> float | None:
    """torch.cuda.max_memory_allocated of rank 0's process, on a GPU run (None on CPU)."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    return torch.cuda.max_memory_allocated() / 2**20


QUANTILES = [q / 20 for q in range(21)]  # 0, 5%, ..., 100%


def quantile(ordered: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``ordered`` (sorted ascending): one of its values."""
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def compute_summary(by_rank: list[list[float]]) -> list[dict]:
    """Per rank, its compute seconds per timed iteration: the mean, 21 quantiles (the spread
    of each rank alone) and the series itself, aligned by iteration across ranks (what the
    simulator samples for the ranks' skew: whole iterations of every rank together, so a
    slow spell of the host that slows every rank is not taken for skew between them)."""
    out = []
    for r, values in enumerate(by_rank):
        if not values:
            continue
        ordered = sorted(values)
        out.append({"rank": r, "mean": statistics.fmean(values), "quantiles": [quantile(ordered, q) for q in QUANTILES],
                    "series": list(values)})
    return out


def prediction_error(rows: list[dict], per_position: list[float]) -> dict:
    """Measured over predicted time, per timed iteration (``predicted`` in each row) and in sum."""
    H = len(per_position)
    timed = rows[warmup_cut(len(rows)):] or rows
    rel = []
    for r in timed:
        r["predicted"] = per_position[r["iteration"] % H]
        rel.append(r["time"] / r["predicted"] - 1.0)
    absolute = sorted(abs(x) for x in rel)
    return {"mean": statistics.fmean(rel), "median_abs": statistics.median(absolute),
            "p95_abs": quantile(absolute, 0.95),
            "note": "per timed iteration: measured / predicted - 1 (row 'predicted': the window position's expected time)"}


def render(s: dict) -> str:
    ev = s["final_eval"] or {}
    evs = ", ".join(f"{k} {v:.4g}" for k, v in ev.items() if k != "iteration")
    lines = [
        f"dreamddp run: algo={s['algorithm']} model={s['model']} data={s['data']} workers={s['workers']}",
        f"  iterations        {s['iterations']} ({s['timed_iterations']} timed)",
        f"  iteration time    {s['mean_iteration_time'] * 1e3:9.2f} ms   (forward {s['mean_forward'] * 1e3:.2f}, "
        f"backward {s['mean_backward'] * 1e3:.2f}, exposed wait {s['mean_wait'] * 1e3:.2f})",
        f"  traffic           {s['bytes_per_iteration'] / 2**20:9.3f} MiB/iteration per worker (payload)",
        f"  throughput        {s['samples_per_second'] or 0:9.1f} samples/s",
        f"  peak memory       {s['peak_rss_mib']:9.1f} MiB (rank 0 resident)",
        *([f"  peak GPU memory   {s['peak_gpu_mib']:9.1f} MiB (rank 0, torch.cuda.max_memory_allocated)"]
          if s.get("peak_gpu_mib") is not None else []),
        f"  final train loss  {s['final_loss']:9.4f}",
        f"  final eval        {evs or 'n/a'}",
    ]
    return "\n".join(lines)


class Progress:
    def __init__(self, total: int, enabled: bool):
        self.bar = tqdm(total=total, desc="train", dynamic_ncols=True, mininterval=1.0) if enabled else None

    def update(self, row: dict) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{row['loss']:.3f}", ms=f"{row['time'] * 1e3:.0f}", wait=f"{row['wait'] * 1e3:.0f}", refresh=False)

    def skip(self) -> None:
        """An iteration this worker did not compute (a timed window closed early)."""
        if self.bar is not None:
            self.bar.update(1)

    def note(self, metrics: dict) -> None:
        if self.bar is not None:
            self.bar.write("eval: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
