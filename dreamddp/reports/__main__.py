"""``python -m dreamddp.results ...``: see dreamddp/results/cli.py."""

import sys

from dreamddp.reports.cli import main

sys.exit(main())
