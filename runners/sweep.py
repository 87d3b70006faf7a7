"""``dreamddp-run -m`` under another name, kept for scripts and make targets.

    python runners/sweep.py experiment=h_ablation_cpu [overrides] [hydra/launcher=slurm_gpu]

Multiruns of ``dreamddp-run`` skip runs whose record says completed with the
same config (dreamddp/sweep_filter.py); this adds ``-m`` and logs at INFO.
"""

from __future__ import annotations

import logging
import sys

from dreamddp import cli

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    sys.argv = ["dreamddp-run", "--multirun", *[a for a in sys.argv[1:] if a not in ("-m", "--multirun")]]
    cli.main()
