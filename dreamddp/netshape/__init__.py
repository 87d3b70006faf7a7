"""Real bandwidth shaping (`bandwidth=tc`): Linux namespaces + tbf qdiscs.

Each worker runs in its own network namespace behind a veth whose upload is
shaped with tbf (optionally its download too), all joined by a bridge in a
private hub namespace. Needs root (or `unshare -Urnm`), `ip` and `tc`; no
netem here, so no latency or loss injection.

    check_tc_available()                      # one-line TcUnavailable if not
    with ShapedNetwork(4, 1.0) as net:        # or gbps=[1, 1, 1, 0.25]
        rc = launch_shaped(net, lambda r: [sys.executable, "train.py"], dict(os.environ), 29500)
"""

from dreamddp.netshape._iproute import NetshapeError
from dreamddp.netshape.preflight import TcUnavailable, check_tc_available, needs_user_namespace, userns_argv
from dreamddp.netshape.spawn import launch_shaped
from dreamddp.netshape.topology import ShapedNetwork, cleanup_stale, default_burst

__all__ = [
    "NetshapeError",
    "ShapedNetwork",
    "TcUnavailable",
    "check_tc_available",
    "cleanup_stale",
    "default_burst",
    "launch_shaped",
    "needs_user_namespace",
    "userns_argv",
]
