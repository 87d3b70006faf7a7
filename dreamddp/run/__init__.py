"""The run lifecycle: the worker process and what starts, supervises and records it.

Launch (``launch``: the local launcher, torchrun under ``failures``), the
process group (``dist_env``), the worker's training loop (``train``),
checkpoints and preemption, failure reports, and the run record with its
W&B mirror (``record``, ``recorder``, ``summary``, ``wandb_log``).  Importing
this package imports none of them: ``dist_env``, ``failures`` and ``preempt``
are low-level helpers (tests/test_layers.py places each module of this
package on its own layer).  Supervising process trees is not here: it is
dreamddp.procs, at the bottom layer, since the link layer starts processes too.
"""
