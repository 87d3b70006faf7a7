"""What the a-priori prediction takes from start-up: a tc link's collectives as timed on it and a
codec's host work per op (a slow worker's profile passes: tests/test_profile_step.py)."""

from __future__ import annotations

import numpy as np
import pytest

from dreamddp.comm.cost import LinkModel, timed_link
from dreamddp.comm.links.tc import PROBE_BYTES, TcLink
from dreamddp.engine.codecs import make_codec
from dreamddp.warmup import codec_seconds
from dreamddp.engine.plan import Payload, SyncOp, When
from dreamddp.prediction import record_link, simulate
from dreamddp.schedule.profile import Profile
from dreamddp.schedule.compute import Compute
from dreamddp.schedule.simulator import simulate_plan

PROBED = {"all_reduce": [(1000, 0.011), (4000, 0.041)], "reduce_scatter": [(1000, 0.02), (4000, 0.05)],
          "all_gather": [(1000, 0.003), (4000, 0.006)]}


def test_a_measured_link_times_each_kind_through_its_own_probes():
    link = LinkModel(1.0, alpha_s=0.001, measured=timed_link(0.001, PROBED))
    assert link.seconds("all_reduce", 2500, 2) == pytest.approx(0.026)  # halfway from 0.011 to 0.041
    assert link.seconds("reduce_scatter", 500, 2) == pytest.approx(0.0105)  # from alpha at 0 bytes
    assert link.seconds("all_gather", 7000, 2) == pytest.approx(0.009)  # beyond: the last segment on
    assert link.seconds("all_reduce", 2500, 1) == 0.0
    # the ring formula at 1 Gbit/s would say 2 x 1/2 x 2500 x 8 / 1e9 s + alpha
    assert LinkModel(1.0, alpha_s=0.001).seconds("all_reduce", 2500, 2) == pytest.approx(0.001 + 2e-5)


class _Warmup:
    world = 2

    def collective_alpha(self):
        return 0.001

    def transfer_times(self, kind, sizes, rounds):
        assert sizes == PROBE_BYTES
        return PROBED[kind]


def test_the_tc_link_models_itself_by_its_start_up_timings_and_keeps_them_on_resume():
    link = TcLink(0.05)
    assert link.model().measured is None  # before start-up: the rate alone
    link.calibrate(_Warmup())
    assert link.model().seconds("reduce_scatter", 4000, 2) == pytest.approx(0.05)
    described = link.describe()
    assert described["link_transfer_ms"]["all_gather"] == [[1000, 3.0], [4000, 6.0]]
    again = TcLink(0.05)
    again.load_setup_state(link.setup_state())
    assert again.model() == link.model()


def test_a_tc_records_link_is_its_timings_at_its_own_rate_only():
    ms = {k: [[b, s * 1e3] for b, s in v] for k, v in PROBED.items()}
    record = {"extra": {"link": {"backend": "tc", "gbps": 0.05, "alpha_ms": 1.0, "link_transfer_ms": ms}},
              "config": {"bandwidth": {"latency_ms": 0.0, "calibration": 1.0}}}
    assert record_link(record).seconds("all_gather", 4000, 2) == pytest.approx(0.006)
    assert record_link(record, gbps=0.1).measured is None  # another rate: the formula's


def test_a_codecs_host_work_comes_before_its_collective_and_after_its_wait():
    """One unit, forward and backward 1 s, step 2 s; one 0.5 s collective launched at the end of
    backward and completed there.  Encoding (0.3 s) delays the collective's start, decoding
    (0.2 s) follows its wait: 4 + 0.3 + 0.5 + 0.2 + 2."""
    op = SyncOp(0, 0, Payload.GRAD, When.END_OF_BACKWARD, When.END_OF_BACKWARD)

    def timed(**host):
        compute = Compute(fwd=np.ones(1) * 2, bp=np.ones(1) * 2, step=2.0, **host)
        return simulate_plan(lambda t: (op,), compute, lambda op: 0.5, H=1, iterations=1).per_iter

    assert timed() == [pytest.approx((6.5, 0.5))]
    assert timed(op_host=lambda op: (0.3, 0.2)) == [pytest.approx((7.0, 0.5))]


def _profile() -> Profile:
    units = ["b", "a"]
    return Profile(units=units, bp={"b": 1.0, "a": 1.0}, comm={"b": 0.0, "a": 0.0}, fwd={"a": 0.5, "b": 0.5},
                   nbytes={"b": 4 * 2**20, "a": 4 * 2**20}, step_time=0.5)


def test_the_prediction_charges_the_timed_codec_on_compressed_ops_only():
    """FLSGD with 4-bit blocks over H=2: one compressed average per window, of both units
    (2 x 2**20 elements); the codec timed at 0.1 s + 0.2 s whatever the size adds 0.3 s per
    window; the same algorithm uncompressed is charged nothing."""
    link = LinkModel(1.0)
    flat = [(2**16, 0.1, 0.2), (2**22, 0.1, 0.2)]
    plain = simulate("flsgd", _profile(), H=2, world=2, link=link, iterations=4)
    quant = dict(compress="quant", compress_bits=4)
    base = simulate("flsgd", _profile(), H=2, world=2, link=link, iterations=4, **quant)
    charged = simulate("flsgd", _profile(), H=2, world=2, link=link, iterations=4, codec_host=flat, **quant)
    assert charged.mean_iter == pytest.approx(base.mean_iter + 0.3 / 2)
    assert simulate("flsgd", _profile(), H=2, world=2, link=link, iterations=4, codec_host=flat).mean_iter \
        == plain.mean_iter


def test_a_codecs_timed_host_work_grows_with_its_payload():
    codec = make_codec("quant", 0.0, 0, 4, 64)
    small, large = codec_seconds(codec, 2**12, 2, True, False), codec_seconds(codec, 2**20, 2, True, False)
    assert 0 < small[0] < large[0] and 0 < small[1] < large[1]

