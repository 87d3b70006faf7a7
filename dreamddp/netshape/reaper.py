"""Watchdog that deletes a ShapedNetwork's namespaces if its owner dies.

Signal handlers and atexit cannot run when the owner is SIGKILLed (or the OOM
killer strikes), so the owner starts this process with a pipe on stdin: EOF
without a "done" line means the owner is gone, and the reaper tears down.
Started in its own session so a terminal Ctrl-C cannot kill it before it has
cleaned up. Stdlib only, loaded by path, so it starts in milliseconds.

Usage: python reaper.py NAME [NAME ...]   (stdin: the owner's pipe)
"""

from __future__ import annotations

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _iproute import delete_netns  # noqa: E402


def main(names: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Blocks until the owner writes "done" (normal close) or dies (EOF).
    data = sys.stdin.buffer.read()
    if b"done" in data:
        return 0
    delete_netns(names)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
