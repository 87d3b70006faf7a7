"""Is a download possible at all? Checked before any worker starts, so it must
be quick: one TCP connect with a hard deadline (DNS included, which a socket
timeout alone does not bound), and no probe when the user declared the hub
offline."""

from __future__ import annotations

import os
import socket
import threading

PROBE_TIMEOUT_S = 2.5


def hub_offline() -> bool:
    """True when HF_HUB_OFFLINE or HF_DATASETS_OFFLINE says so (values as HF reads them)."""
    return any(
        os.environ.get(v, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def reachable(host: str, port: int = 443, timeout: float = PROBE_TIMEOUT_S) -> bool:
    ok: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=connect, daemon=True)
    t.start()
    t.join(timeout)
    return bool(ok)
