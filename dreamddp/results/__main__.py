"""``python -m dreamddp.results ...``: see dreamddp/results/cli.py."""

import sys

from dreamddp.results.cli import main

sys.exit(main())
