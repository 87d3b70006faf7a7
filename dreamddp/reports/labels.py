"""The benchmark's runs ("segments") by their labels in runners/catalogue/runs.yaml, grouped as the
reports read them; dreamddp/bench/segments.py builds the same runs' command lines."""

from __future__ import annotations

from dreamddp.study import catalogue_runs

_ALL = catalogue_runs()  # label -> RunEntry, in the catalogue's order
TIMED = [label for label, r in _ALL.items() if r.link == "emulated"]  # they share the emulated link
IDEAL = [label for label, r in _ALL.items() if r.link == "ideal"]  # the engine-overhead runs
OPT_IN = {label for label, r in _ALL.items() if r.opt_in}  # not among the default algorithms
# the run an opt-in segment varies: named where its label does not say it (``base+variant``)
VARIES = {label: r.varies or label.rsplit("+", 1)[0] for label, r in _ALL.items()}
