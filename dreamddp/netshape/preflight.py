"""Can `bandwidth=tc` work here? One fast check, one clear line when not.

The check builds a bridge, a veth pair and a tbf qdisc in a throwaway network
namespace (`unshare -n`, or `unshare -Urn` for a non-root user), which the
kernel destroys when the probe exits: nothing to clean up, ~20 ms.
"""

from __future__ import annotations

import os
import shutil
import subprocess

_FALLBACK = "use the emulated link instead (bandwidth=1gbit)"
_PROBE = (
    "ip link add pfbr type bridge && "
    "ip link add pfa type veth peer name pfb && "
    "ip link set pfa master pfbr && "
    "tc qdisc add dev pfa root tbf rate 1gbit burst 131072 latency 50ms"
)


class TcUnavailable(RuntimeError):
    """Kernel traffic shaping cannot be used on this host/config."""


def _fail(reason: str) -> TcUnavailable:
    return TcUnavailable(f"bandwidth=tc unavailable: {reason}; {_FALLBACK}")


def needs_user_namespace() -> bool:
    """True when the launcher must re-run itself under `unshare -Urnm`."""
    return os.geteuid() != 0


def userns_argv(argv: list[str]) -> list[str]:
    """argv that re-runs ``argv`` as root of a fresh user+net+mount namespace."""
    return ["unshare", "-Urnm", "--", *argv]


def _userns_blocked() -> str | None:
    def read(path: str) -> str | None:
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return None

    if read("/proc/sys/user/max_user_namespaces") == "0":
        return "user.max_user_namespaces is 0"
    if read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return "kernel.unprivileged_userns_clone is 0"
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return "AppArmor restricts unprivileged user namespaces"
    return None


def check_tc_available(nnodes: int = 1) -> None:
    """Raise TcUnavailable (one line) unless tbf shaping can run here."""
    if isinstance(nnodes, bool) or not isinstance(nnodes, int) or nnodes < 1:
        raise ValueError(f"check_tc_available: nnodes must be an int >= 1, got {nnodes!r}")
    if nnodes > 1:
        raise _fail(f"it shapes links between namespaces on one host and cannot span nnodes={nnodes}")
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            raise _fail(f"`{tool}` is not installed (apt-get install iproute2 util-linux)")
    unshare = ["unshare", "-n"]
    if os.geteuid() != 0:
        blocked = _userns_blocked()
        if blocked:
            raise _fail(f"not root and no unprivileged user namespaces ({blocked})")
        unshare = ["unshare", "-Urn"]
    try:
        proc = subprocess.run([*unshare, "--", "sh", "-c", _PROBE], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        raise _fail("the namespace probe timed out") from None
    if proc.returncode != 0:
        err = " ".join(proc.stderr.split()) or f"exit code {proc.returncode}"
        if "unshare" in err and ("Operation not permitted" in err or "Permission denied" in err):
            raise _fail(f"cannot create a network namespace ({err})")
        raise _fail(f"the bridge/veth/tbf probe failed ({err})")
