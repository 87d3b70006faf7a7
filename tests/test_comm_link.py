"""Pure tests of the link models and the in-process FakeCommunicator (no processes)."""

import threading
import time

import pytest
import torch

from types import SimpleNamespace

from dreamddp.checks import ConfigError
from dreamddp.comm.cost import collective_time, ring_factor
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.comm.links import LINKS, build_link
from dreamddp.comm.links.emulated import EmulatedLink
from dreamddp.comm.links.ideal import IdealLink
from dreamddp.comm.links.tc import TcLink

# gbps = 8 makes the bandwidth term nbytes / 1e9 seconds before the ring factor.
MB = 1_000_000


@pytest.mark.parametrize(
    "world,ar,other", [(1, 0.0, 0.0), (2, 1.0, 0.5), (4, 1.5, 0.75), (8, 1.75, 0.875)]
)
def test_ring_factor_and_time(world, ar, other):
    assert ring_factor("all_reduce", world) == ar
    assert ring_factor("reduce_scatter", world) == other
    assert ring_factor("all_gather", world) == other
    assert collective_time("all_reduce", MB, world, 8.0) == pytest.approx(ar * 1e-3, rel=1e-12)
    assert collective_time("reduce_scatter", MB, world, 8.0) == pytest.approx(other * 1e-3, rel=1e-12)
    assert collective_time("all_gather", MB, world, 8.0) == pytest.approx(other * 1e-3, rel=1e-12)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_latency_terms_and_calibration(world):
    lat = 1e-4
    bw_ar = ring_factor("all_reduce", world) * 1e-3
    bw_rs = ring_factor("reduce_scatter", world) * 1e-3
    got = collective_time("all_reduce", MB, world, 8.0, latency_s=lat, calibration=1.25)
    assert got == pytest.approx(1.25 * bw_ar + 2 * (world - 1) * lat, rel=1e-12)
    got = collective_time("all_gather", MB, world, 8.0, latency_s=lat, calibration=1.25)
    assert got == pytest.approx(1.25 * bw_rs + (world - 1) * lat, rel=1e-12)


def test_world_one_is_free_even_with_latency():
    assert collective_time("all_reduce", 10 * MB, 1, 0.001, latency_s=1.0) == 0.0


def test_paper_style_numbers():
    # 4 MB all-reduce on 2 workers at 0.1 Gbit/s: 32e6 bits / 1e8 bit/s.
    assert collective_time("all_reduce", 4 * MB, 2, 0.1) == pytest.approx(0.32, rel=1e-12)


@pytest.mark.parametrize(
    "args,field",
    [
        (("broadcast", MB, 2, 1.0), "collective kind"),
        (("all_reduce", MB, 0, 1.0), "world"),
        (("all_reduce", -1, 2, 1.0), "nbytes"),
        (("all_reduce", MB, 2, 0.0), "bandwidth.gbps"),
        (("all_reduce", MB, 2, 1.0, -1e-3), "bandwidth.latency_ms"),
        (("all_reduce", MB, 2, 1.0, 0.0, 0.0), "bandwidth.calibration"),
    ],
)
def test_collective_time_errors(args, field):
    with pytest.raises(ValueError, match=field):
        collective_time(*args)


def test_emulated_link_is_fifo():
    link = EmulatedLink(gbps=8.0, alpha_s=0.0)
    assert link.reserve("all_reduce", MB, 2, now=10.0) == pytest.approx((10.0, 10.001))
    # Launched while the first is on the wire: queues behind it.
    assert link.reserve("all_gather", 2 * MB, 2, now=10.0005) == pytest.approx((10.001, 10.002))
    assert link.free_at == pytest.approx(10.002)
    # Launched after the wire went idle: starts at once.
    assert link.reserve("all_reduce", MB, 2, now=20.0) == pytest.approx((20.0, 20.001))
    link.reset()
    assert link.reserve("all_reduce", MB, 2, now=5.0) == pytest.approx((5.0, 5.001))


def test_emulated_link_latency():
    link = EmulatedLink(gbps=8.0, latency_ms=0.5, alpha_s=0.0)
    assert link.reserve("all_reduce", MB, 4, now=0.0) == pytest.approx((0.0, 1.5e-3 + 6 * 5e-4))
    link.reset()
    assert link.reserve("reduce_scatter", MB, 4, now=0.0) == pytest.approx((0.0, 0.75e-3 + 3 * 5e-4))
    assert link.describe() == {
        "backend": "emulated", "paced": True, "alpha_ms": 0.0, "gbps": 8.0, "latency_ms": 0.5, "calibration": 1.0,
        "real_transfer_ms": None,  # not probed: alpha given
    }
    assert link.real_transfer is None


def test_emulated_link_rate_from_a_comm_backward_ratio_and_measured_alpha():
    """No pacing until calibration measured alpha (and, with comm_ratio, the backward pass)."""
    link = EmulatedLink(None, comm_ratio=7.0)
    assert link.needs_calibration
    with pytest.raises(RuntimeError, match="not calibrated yet"):
        link.reserve("all_reduce", MB, 2, now=0.0)
    probed = [(MB, 0.5), (4 * MB, 1.0)]
    kinds = {"reduce_scatter": [(MB, 0.75), (4 * MB, 2.0)], "all_gather": [(MB, 0.25), (4 * MB, 0.5)]}
    warm = SimpleNamespace(backward_time=lambda: 0.5, model_bytes=4 * MB, world=4, collective_alpha=lambda: 0.25,
                           real_transfer=lambda: probed, real_transfer_kinds=lambda: kinds)
    info = link.calibrate(warm)
    # all-reduce of 4 MB on 4 workers sends 1.5 x 4 MB = 48 Mbit; 7 x 0.5 s -> 48e6 / 3.5 bit/s
    assert link.gbps == pytest.approx(48e6 / 3.5 / 1e9) == info["gbps"] and info["alpha_s"] == 0.25
    assert not link.needs_calibration
    # every collective pays alpha on top of its bytes: 0.25 + 3.5 s
    assert link.reserve("all_reduce", 4 * MB, 4, now=0.0)[1] == pytest.approx(3.75)
    assert link.describe()["alpha_ms"] == 250.0
    # the real backend's transfer by size: alpha at no bytes, then the probed sizes
    assert link.describe()["real_transfer_ms"] == [[MB, 500.0], [4 * MB, 1000.0]]
    assert link.real_transfer.points == ((0, 0.25), (MB, 0.5), (4 * MB, 1.0))
    # the other kinds by their own probes, in the record too
    assert link.describe()["real_transfer_kinds_ms"]["reduce_scatter"] == [[MB, 750.0], [4 * MB, 2000.0]]
    assert link.real_transfer.seconds("reduce_scatter", 4 * MB, 4) == 2.0
    assert link.real_transfer.seconds("all_gather", MB, 4) == 0.25
    fresh = EmulatedLink(None, comm_ratio=7.0)
    fresh.load_setup_state(link.setup_state())  # what a checkpoint keeps: no new measurement
    assert (fresh.gbps, fresh.alpha_s) == (link.gbps, 0.25) and not fresh.needs_calibration
    assert fresh.real_transfer == link.real_transfer
    fixed = EmulatedLink(8.0)  # a fixed rate still measures its alpha and the real transfer
    assert fixed.needs_calibration and fixed.calibrate(warm) == {"alpha_s": 0.25, "real_transfer_s": probed,
                                                                 "real_transfer_kinds_s": kinds}


def test_real_transfer_interpolates_the_probed_sizes():
    from dreamddp.comm.cost import RealTransfer

    real = RealTransfer(((0, 1e-3), (MB, 2e-3), (4 * MB, 5e-3)))
    assert real.seconds("all_reduce", MB // 2, 2) == pytest.approx(1.5e-3)
    assert real.seconds("all_reduce", 2 * MB, 2) == pytest.approx(3e-3)
    assert real.seconds("all_reduce", 7 * MB, 2) == pytest.approx(8e-3)  # beyond: the last segment's slope
    # a reduce-scatter moves half an all-reduce's bytes: timed as the all-reduce of half as many
    assert real.seconds("reduce_scatter", 4 * MB, 2) == pytest.approx(real.seconds("all_reduce", 2 * MB, 2))
    assert real.seconds("all_reduce", MB, 1) == 0.0 and real.seconds("all_reduce", 0, 2) == 0.0
    with pytest.raises(ValueError, match="increasing"):
        RealTransfer(((MB, 1e-3), (MB, 2e-3)))
    # a kind probed on its own is interpolated at its whole tensor's bytes, not ring-scaled
    probed = RealTransfer.probed(1e-3, [(MB, 2e-3)], {"reduce_scatter": [(MB, 6e-3)]})
    assert probed.seconds("reduce_scatter", MB // 2, 2) == pytest.approx(3.5e-3)
    assert probed.seconds("all_gather", MB, 2) == pytest.approx(1.5e-3)  # not probed: the ring-scaled all-reduce
    with pytest.raises(ValueError, match="unknown collective"):
        RealTransfer(((0, 1e-3),), (("broadcast", ((0, 1e-3),)),))


def test_alpha_is_charged_once_per_collective():
    from dreamddp.comm.cost import LinkModel

    m = LinkModel(8.0, alpha_s=1e-3)
    # two 1 MB all-reduces on 2 workers pay alpha twice, one 2 MB all-reduce once
    assert 2 * m.seconds("all_reduce", MB, 2) == pytest.approx(m.seconds("all_reduce", 2 * MB, 2) + 1e-3)
    assert m.seconds("all_reduce", MB, 1) == 0.0


def test_emulated_link_is_thread_safe():
    link = EmulatedLink(gbps=8.0, alpha_s=0.0)
    spans = []
    lock = threading.Lock()

    def worker():
        for _ in range(200):
            s = link.reserve("all_reduce", MB, 2, now=0.0)
            with lock:
                spans.append(s)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans.sort()
    assert len(spans) == 800
    # Every reservation starts exactly where the previous one ended: no overlap, no gap.
    for (s0, d0), (s1, _) in zip(spans, spans[1:]):
        assert s1 == d0
    assert spans[-1][1] == pytest.approx(800 * 1e-3)


def test_ideal_link():
    link = IdealLink()
    assert link.reserve("all_reduce", 10 * MB, 8, now=3.5) == (3.5, 3.5)
    assert link.reserve("all_reduce", 10 * MB, 8, now=3.5) == (3.5, 3.5)
    assert link.describe() == {"backend": "ideal", "paced": False, "alpha_ms": None}


def bw(backend, gbps=None, **kw):
    return SimpleNamespace(**{"backend": backend, "gbps": gbps, "latency_ms": 0.0, "comm_ratio": None,
                              "calibration": 1.0, "worker_gbps": None, "carrier": "auto", "hold_core": None, **kw})


def test_build_link():
    assert set(LINKS) == {"ideal", "emulated", "tc"}
    assert isinstance(build_link(bw("ideal")), IdealLink)
    emu = build_link(bw("emulated", 1.0, latency_ms=2.0, calibration=1.1))
    assert isinstance(emu, EmulatedLink)
    assert (emu.gbps, emu.latency_ms, emu.calibration) == (1.0, 2.0, 1.1)
    assert emu.model().seconds("all_reduce", MB, 2) == collective_time("all_reduce", MB, 2, 1.0, 2e-3, 1.1)
    tc = build_link(bw("tc", 0.5))
    assert isinstance(tc, TcLink) and not tc.paced and tc.reserve("all_reduce", MB, 2, 1.0) == (1.0, 1.0)
    assert tc.describe() == {"backend": "tc", "paced": False, "alpha_ms": None, "gbps": 0.5, "latency_ms": 0.0}
    uneven = build_link(bw("tc", 1.0, worker_gbps=[1, 1, 1, 0.25]))  # the slowest uplink gates a ring
    twin = build_link(bw("emulated", 0.25))
    assert uneven.model().seconds("all_reduce", MB, 4) == twin.model().seconds("all_reduce", MB, 4)
    assert uneven.describe()["gbps"] == 1.0 and uneven.describe()["worker_gbps"] == [1, 1, 1, 0.25]
    assert build_link(bw("ideal")).model() is None  # the simulator then uses measured times


def test_the_emulated_link_paces_every_worker_at_the_slowest_uplink():
    """A ring collective waits for its slowest sender at every hop: min(worker_gbps) paces all."""
    uneven = build_link(bw("emulated", 1.0, worker_gbps=[1, 0.25]))
    twin = build_link(bw("emulated", 0.25))
    for link in (uneven, twin):
        link.alpha_s = 0.0
    assert uneven.model() == twin.model()
    assert uneven.reserve("all_reduce", MB, 2, now=1.0) == twin.reserve("all_reduce", MB, 2, now=1.0)
    assert uneven.describe()["gbps"] == 1.0 and uneven.describe()["worker_gbps"] == [1.0, 0.25]
    only_rates = build_link(bw("emulated", worker_gbps=[2, 0.5]))  # no nominal rate: the uplinks say it
    assert only_rates.model().gbps == 0.5
    only_rates.alpha_s = 0.0
    assert not only_rates.needs_calibration  # the rate is known: nothing but alpha to measure


@pytest.mark.parametrize(
    "cfg,msg",
    [
        (bw("emulated"), "bandwidth.gbps: required for backend emulated"),
        (bw("emulated", -1.0), "bandwidth.gbps=-1.0: must be > 0"),
        (bw("tc"), "bandwidth.gbps: required for backend tc"),
        (bw("emulated", 1.0, latency_ms=-1.0), "bandwidth.latency_ms"),
        (bw("emulated", 1.0, calibration=0.0), "bandwidth.calibration"),
        (bw("nccl", 1.0), "bandwidth.backend=nccl: unknown link"),
        (bw("emulated", 1.0, carrier="lazy"), "bandwidth.carrier=lazy: unknown value"),
        (bw("ideal", carrier="deferred"), "bandwidth.carrier=deferred: only a paced link"),
        (bw("tc", 1.0, carrier="deferred"), "bandwidth.carrier=deferred: only a paced link"),
        (bw("ideal", carrier="step"), "bandwidth.carrier=step: only a paced link"),
        (bw("ideal", hold_core=True), "bandwidth.hold_core=true: only a paced link"),
    ],
)
def test_build_link_errors(cfg, msg):
    with pytest.raises(ConfigError, match=msg):
        build_link(cfg)


def test_carrier_and_hold_core_resolve_per_link_and_device():
    emu, ideal = build_link(bw("emulated", 1.0)), build_link(bw("ideal"))
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert (emu.carrier("auto", cpu), emu.carrier("auto", cuda), emu.carrier("eager", cpu)) == ("deferred", "eager", "eager")
    # averages merged iterations after their launch: started as each iteration ends, on CPU
    assert (emu.carrier("auto", cpu, late=True), emu.carrier("auto", cuda, late=True)) == ("step", "eager")
    assert emu.carrier("deferred", cpu, late=True) == "deferred"
    assert ideal.carrier("auto", cpu) == "eager"
    assert emu.hold_core(None, cpu, True) and not emu.hold_core(None, cpu, False)
    assert not emu.hold_core(None, cuda, True) and emu.hold_core(True, cpu, False)
    assert not ideal.hold_core(None, cpu, True)


# ---------------------------------------------------------------- FakeCommunicator


def per_rank(world):
    """Rank r holds input + 10 * r (rank 0's input is the real one)."""
    return lambda kind, tag, t: [t + 10.0 * r for r in range(world)]


def test_fake_default_is_identity_and_records_calls():
    comm = FakeCommunicator()
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    ptr = x.data_ptr()
    h = comm.all_reduce_avg(x, tag="unit3")
    x.add_(100.0)  # mutating in flight: the result comes from launch-time values
    assert comm.pending() == 1 and h.done()
    assert h.wait() >= 0.0
    assert torch.equal(x, torch.tensor([1.0, 2.0, 3.0, 4.0]))
    call = comm.calls[0]
    assert (call.kind, call.tag, call.nbytes, call.data_ptr) == ("all_reduce", "unit3", 16, ptr)
    assert torch.equal(call.values, torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert comm.pending() == 0


def test_fake_exact_average_and_result_only_at_wait():
    comm = FakeCommunicator(world_size=4, peer_fn=per_rank(4))
    x = torch.tensor([1.0, 2.0])
    h = comm.all_reduce_avg(x)
    assert torch.equal(x, torch.tensor([1.0, 2.0]))  # nothing lands before wait()
    h.wait()
    assert torch.equal(x, torch.tensor([16.0, 17.0]))  # mean of +0, +10, +20, +30


def test_fake_reduce_scatter_and_all_gather():
    comm = FakeCommunicator(world_size=2, rank=1, peer_fn=per_rank(2))
    flat = torch.arange(6.0)
    out = torch.empty(3)
    comm.reduce_scatter_avg(flat, out, tag="rs").wait()
    assert torch.equal(out, torch.tensor([8.0, 9.0, 10.0]))  # rank 1's chunk of arange + 5
    full = torch.empty(6)
    comm.all_gather(full, torch.tensor([1.0, 2.0, 3.0]), tag="ag").wait()
    assert torch.equal(full, torch.tensor([1.0, 2.0, 3.0, 11.0, 12.0, 13.0]))
    recs = comm.drain()
    assert [(r.kind, r.tag, r.nbytes, r.wire_bytes) for r in recs] == [
        ("reduce_scatter", "rs", 24, 12.0),
        ("all_gather", "ag", 24, 12.0),
    ]
    assert all(r.complete is not None for r in recs)
    assert comm.drain() == []


def test_fake_control_messages():
    comm = FakeCommunicator(world_size=3, peer_fn=lambda k, tag, t: [t, t * 3, t - 1])
    x = torch.tensor([1.0, -2.0])
    comm.broadcast(x, src=1)
    assert torch.equal(x, torch.tensor([3.0, -6.0]))
    comm.all_reduce_max(x)
    assert torch.equal(x, torch.tensor([9.0, -6.0]))
    assert [c.kind for c in comm.calls] == ["broadcast", "all_reduce_max"]
    assert comm.drain() == []  # control traffic is not accounted


def test_fake_errors():
    comm = FakeCommunicator(world_size=2)
    with pytest.raises(ValueError, match="flat: numel 5"):
        comm.reduce_scatter_avg(torch.zeros(5), torch.zeros(2))
    with pytest.raises(ValueError, match="floating-point"):
        comm.all_reduce_avg(torch.zeros(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="out: numel 3"):
        comm.all_gather(torch.zeros(3), torch.zeros(2))
    bad = FakeCommunicator(world_size=2, peer_fn=lambda k, tag, t: [t])
    with pytest.raises(ValueError, match="peer_fn: returned 1"):
        bad.all_reduce_avg(torch.zeros(2))
    with pytest.raises(ValueError, match="rank"):
        FakeCommunicator(world_size=2, rank=2)


def test_fake_paced_by_link_and_wait_is_idempotent():
    comm = FakeCommunicator(world_size=2, link=EmulatedLink(gbps=0.08, alpha_s=0.0))
    x = torch.zeros(MB // 4)  # 1 MB -> 0.1 s on 2 workers at 0.08 Gbit/s
    t0 = time.perf_counter()
    h1 = comm.all_reduce_avg(x, tag="a")
    h2 = comm.all_reduce_avg(x, tag="b")  # queues behind the first on the wire
    assert h2.record.start == max(h2.record.launch, h1.record.deadline)
    assert h2.record.deadline - h2.record.start == pytest.approx(0.1)
    h2.wait()
    assert time.perf_counter() - t0 >= 0.2 - 1e-6
    assert h1.done()
    assert h2.wait() == 0.0 and h2.record.blocked > 0
    h1.wait()
    assert comm.pending() == 0


@pytest.mark.parametrize(
    "overrides,late",
    [
        (["algo=dreamddp"], False),
        (["algo=dreamddp", "algo.merge_delay=1"], True),
        # averages awaited in the next iteration's forward: carried as the iteration ends
        (["algo=dreamddp", "algo.overlap_forward=true"], True),
        (["algo=streaming_diloco"], True),
        (["algo=flsgd"], False),
    ],
)
def test_the_algorithms_that_merge_late_get_the_step_carrier(compose_cfg, overrides, late):
    from dreamddp.algorithms import ALGORITHMS

    cfg = compose_cfg(overrides)
    merges_late = ALGORITHMS.lookup(cfg.algo.name).merges_late(cfg.algo)
    assert merges_late is late
    emu = build_link(bw("emulated", 1.0))
    assert emu.carrier("auto", torch.device("cpu"), merges_late) == ("step" if late else "deferred")
