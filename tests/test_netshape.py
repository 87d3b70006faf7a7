"""bandwidth=tc: namespaces/tbf are built and always removed; shaped gloo
all-reduce matches the ring formula; one slow worker bounds the ring."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from dreamddp.comm.cost import collective_time
from dreamddp.netshape import (
    ShapedNetwork,
    TcUnavailable,
    check_tc_available,
    cleanup_stale,
    launch_shaped,
    userns_argv,
)

ROOT = Path(__file__).resolve().parents[1]


def _tc_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root for `ip netns` (CI runs as root)"
    try:
        check_tc_available()
    except TcUnavailable as e:
        return str(e)
    return None


_SKIP = _tc_skip_reason()
def needs_tc(test):
    """Marked ``tc`` (real shaped links) and skipped where this host cannot shape them."""
    return pytest.mark.tc(pytest.mark.skipif(_SKIP is not None, reason=str(_SKIP))(test))


def _ours(prefix: str) -> list[str]:
    """Everything carrying our prefix in `ip netns list` and the host's `ip link`."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [line for line in (ns + links).splitlines() if prefix in line]


def _wait_gone(prefix: str, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while _ours(prefix) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _ours(prefix)


# --- no privileges needed ------------------------------------------------
def test_preflight_rejects_multi_node_with_one_line():
    with pytest.raises(TcUnavailable) as e:
        check_tc_available(nnodes=2)
    msg = str(e.value)
    assert "\n" not in msg and "nnodes=2" in msg and "bandwidth=1gbit" in msg
    with pytest.raises(ValueError):
        check_tc_available(nnodes=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_workers=0, gbps=1.0), "n_workers"),
        (dict(n_workers=3, gbps=[1.0, 1.0]), "2 per-worker gbps values for 3 workers"),
        (dict(n_workers=2, gbps=-1.0), "gbps"),
        (dict(n_workers=2, gbps=float("inf")), "gbps"),
        (dict(n_workers=2, gbps=1.0, burst_bytes=10), "burst_bytes"),
        (dict(n_workers=2, gbps=1.0, prefix="bad-name"), "prefix"),
    ],
)
def test_bad_arguments_fail_before_touching_the_system(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ShapedNetwork(**kwargs)


# --- lifecycle -------------------------------------------------------------
@needs_tc
def test_build_shapes_both_directions_and_removes_everything():
    prefix = "ddptlife"
    with ShapedNetwork(3, [1.0, 1.0, 0.25], prefix=prefix, shape_download=True) as net:
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert all(net.namespace(r) in names for r in range(3)) and net.hub in names
        assert net.worker_ip(2) == "10.77.0.3" and net.master_addr == "10.77.0.1"
        assert net.wrap(1, ["true"])[-1] == "true" and net.env(1)["GLOO_SOCKET_IFNAME"] == net.ifname
        up = subprocess.run(["tc", "-n", net.namespace(2), "qdisc", "show", "dev", net.ifname],
                            capture_output=True, text=True).stdout
        down = subprocess.run(["tc", "-n", net.hub, "qdisc", "show", "dev", "v2"],
                              capture_output=True, text=True).stdout
        assert "tbf" in up and "250Mbit" in up and "tbf" in down and "250Mbit" in down
        ping = subprocess.run(net.wrap(0, [sys.executable, "-c",
                              f"import socket; socket.create_connection(('{net.worker_ip(2)}', 9), 2)"]),
                              capture_output=True, text=True)
        assert "ConnectionRefused" in ping.stderr  # reached worker 2; nothing listens on port 9
    assert net.closed and _ours(prefix) == []
    net.close()  # idempotent
    with ShapedNetwork(2, 1.0, prefix=prefix) as net:  # default: uploads only
        down = subprocess.run(["tc", "-n", net.hub, "qdisc", "show", "dev", "v1"], capture_output=True, text=True)
        assert "tbf" not in down.stdout and "tbf" in net.qdisc_stats(1)
    assert _ours(prefix) == []


@needs_tc
def test_exception_inside_with_block_still_tears_down():
    prefix = "ddptexc"
    with pytest.raises(RuntimeError, match="boom"):
        with ShapedNetwork(2, 1.0, prefix=prefix):
            assert _ours(prefix)
            raise RuntimeError("boom")
    assert _ours(prefix) == []


def _owner_script(prefix: str) -> list[str]:
    code = f"""
        import sys, time
        from dreamddp.netshape import ShapedNetwork
        with ShapedNetwork(2, 1.0, prefix={prefix!r}):
            print("ready", flush=True)
            time.sleep(60)
    """
    return [sys.executable, "-c", textwrap.dedent(code)]


@needs_tc
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_owner_killed_by_signal_leaves_nothing(sig):
    prefix = f"ddptsig{int(sig)}"
    # SIGINT's default restored for the owner: a test run started in the background (``make test &``)
    # hands its children SIGINT ignored, which Python then keeps ignoring (it sat out its 60 s sleep)
    proc = subprocess.Popen(_owner_script(prefix), stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "ready" and _ours(prefix)
    proc.send_signal(sig)
    rc = proc.wait(timeout=20)
    if sig == signal.SIGKILL:  # no handler can run: the reaper cleans up
        assert _wait_gone(prefix) == []
    else:  # the handlers cleaned up before the process died, then re-raised
        assert _ours(prefix) == []
        assert rc == -sig  # died of the signal, as without our handlers (Python re-kills on KeyboardInterrupt)


@needs_tc
def test_cleanup_stale_removes_dead_owners_only():
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid now names an owner that is gone
    stale, live = f"ddptstale-{dead.pid}-hub", f"ddptstale-{os.getpid()}-hub"
    for name in (stale, live):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert cleanup_stale("ddptstale") == [stale]
        assert _ours("ddptstale") == [live]
    finally:
        cleanup_stale("ddptstale", include_live=True)
    assert _ours("ddptstale") == []


# --- launch_shaped ----------------------------------------------------------
@needs_tc
def test_launch_places_each_rank_in_its_namespace(tmp_path):
    net = ShapedNetwork(3, 1.0, prefix="ddptplace")
    script = 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $MASTER_ADDR $MASTER_PORT $GLOO_SOCKET_IFNAME ' \
             '$(ip -4 -o addr show shaped0 | tr -s " " | cut -d" " -f4)" > ' + str(tmp_path) + '/$RANK'
    rc = launch_shaped(net, lambda r: ["sh", "-c", script], dict(os.environ), 29511)
    assert rc == 0 and net.closed and _ours("ddptplace") == []
    for r in range(3):
        got = (tmp_path / str(r)).read_text().split()
        assert got == [str(r), "3", str(r), "10.77.0.1", "29511", "shaped0", f"10.77.0.{r + 1}/24"]


@needs_tc
def test_first_failure_stops_all_and_returns_its_code():
    net = ShapedNetwork(3, 1.0, prefix="ddptfail")
    argv = lambda r: ["sh", "-c", "sleep 0.5; exit 3"] if r == 1 else ["sleep", "60"]  # noqa: E731
    t0 = time.monotonic()
    assert launch_shaped(net, argv, dict(os.environ), 29512) == 3
    assert time.monotonic() - t0 < 20 and _ours("ddptfail") == []


@needs_tc
def test_worker_sigkill_stops_the_others_and_tears_down():
    net = ShapedNetwork(3, 1.0, prefix="ddptkill")
    result = {}
    th = threading.Thread(target=lambda: result.setdefault(
        "rc", launch_shaped(net, lambda r: ["sleep", "60"], dict(os.environ), 29513)))
    th.start()
    deadline = time.monotonic() + 10
    pids = []
    while not pids and time.monotonic() < deadline:
        out = subprocess.run(["ip", "netns", "pids", net.namespace(1)], capture_output=True, text=True).stdout
        pids = [int(p) for p in out.split()]
        time.sleep(0.05)
    os.kill(pids[0], signal.SIGKILL)
    th.join(timeout=30)
    assert result["rc"] == 128 + signal.SIGKILL and _ours("ddptkill") == []


@needs_tc
def test_signal_to_the_launcher_stops_workers_and_returns_128_plus_signum():
    code = textwrap.dedent("""
        import os
        from dreamddp.netshape import ShapedNetwork, launch_shaped
        with ShapedNetwork(2, 1.0, prefix="ddptlsig") as net:
            print("ready", flush=True)
            raise SystemExit(launch_shaped(net, lambda r: ["sleep", "60"], dict(os.environ), 29515))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # let the workers start
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert _ours("ddptlsig") == []


# --- shaped collectives ----------------------------------------------------------
def _linkcheck(tmp_path, *args) -> list[dict]:
    out = tmp_path / "rows.json"
    cmd = [sys.executable, "-m", "dreamddp.bench.link", "--backend", "tc", *args, "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())["rows"]


@needs_tc
def test_shaped_all_reduce_takes_the_ring_formula_time(tmp_path):
    rows = _linkcheck(tmp_path, "--gbps", "0.5", "--workers", "3", "--sizes-mb", "16", "--reps", "3")
    (row,) = rows
    assert row["formula_s"] == pytest.approx(collective_time("all_reduce", 16_000_000, 3, 0.5))
    assert row["median_s"] == pytest.approx(row["formula_s"], rel=0.15), row


@needs_tc
def test_one_slow_worker_bounds_the_all_reduce(tmp_path):
    rows = _linkcheck(tmp_path, "--gbps", "1,1,0.25", "--sizes-mb", "8", "--reps", "3")
    (row,) = rows
    slow = collective_time("all_reduce", 8_000_000, 3, 0.25)
    fast = collective_time("all_reduce", 8_000_000, 3, 1.0)
    assert row["median_s"] == pytest.approx(slow, rel=0.15) and row["median_s"] > 3 * fast


@needs_tc
def test_works_as_root_of_a_user_namespace():
    # The route for non-root users: the launcher re-runs itself via userns_argv.
    code = textwrap.dedent("""
        import os
        from dreamddp.netshape import ShapedNetwork, launch_shaped
        with ShapedNetwork(2, 1.0, prefix="ddptuserns") as net:
            probe = "ip -4 -o addr show shaped0 | grep -q 10.77.0.$((RANK + 1))"
            raise SystemExit(launch_shaped(net, lambda r: ["sh", "-c", probe], dict(os.environ), 29514))
    """)
    proc = subprocess.run(userns_argv([sys.executable, "-c", code]), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _ours("ddptuserns") == []  # its names lived on a private tmpfs, never on the host
