"""``python -m dreamddp.reports ...`` (``dreamddp-results``): see dreamddp/reports/cli.py."""

import sys

from dreamddp.reports.cli import main

sys.exit(main())
