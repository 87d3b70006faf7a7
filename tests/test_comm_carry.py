"""Which real collectives the deferred carrier starts at a wait (comm/carry.py), exactly.

The carrier runs this grouping on tensors (tests/test_comm_carrier.py checks it
on real gloo workers) and the simulator on a plan's ops; here, on slots.
"""

from __future__ import annotations

from dreamddp.comm.carry import PACK_BYTES, SMALL_BYTES, Real, Slot, carried


def ar(buffer, offset, nbytes, family="f32"):
    return Slot("all_reduce", buffer, offset, nbytes, family)


def test_adjacent_slices_merge_small_ones_pack_and_other_kinds_break_the_stretch():
    big = SMALL_BYTES + 4
    slots = [ar("flat", 0, 400), ar("flat", 400, 1000), ar("flat", 1400, 4),
             Slot("reduce_scatter", "rs", 0, 64),
             ar("flat", 1404, 996), ar("flat", 2800, 1200),  # a gap after 2400: not adjacent
             ar("big", 0, big), ar("other", 0, 256)]
    assert carried(slots) == [
        Real(((0, 1, 2),)),  # one in place
        Real(((3,),)),  # the reduce-scatter, alone
        Real(((4,), (5,), (7,))),  # the small runs packed, in memory order (buffers by first launch)...
        Real(((6,),)),  # ...then the big one in place
    ]


def test_launch_order_is_not_memory_order():
    # gradient hooks may fire out of index order: slices are put in memory order first
    slots = [ar("g", 200, 100), ar("g", 0, 100), ar("g", 100, 100)]
    assert carried(slots) == [Real(((1, 2, 0),))]


def test_overlapping_slices_keep_launch_order_and_families_do_not_mix():
    overlap = [ar("g", 100, 100), ar("g", 0, 150)]
    assert carried(overlap) == [Real(((0,), (1,)))]  # packed in launch order, not merged
    mixed = [ar("g", 0, 100), ar("g", 100, 100, family="f16")]
    assert carried(mixed) == [Real(((0,),)), Real(((1,),))]  # neither merged nor packed together


def test_the_pack_holds_at_most_pack_bytes():
    n = PACK_BYTES // SMALL_BYTES + 1  # one more small run than fits
    slots = [ar(f"b{i}", 0, SMALL_BYTES) for i in range(n)]
    reals = carried(slots)
    assert reals[0] == Real(tuple((i,) for i in range(n - 1)))
    assert reals[1:] == [Real(((n - 1,),))]
    assert reals[0].nbytes(slots) == PACK_BYTES
