"""Order matching never crosses a process group: collectives that carry `Group size` but no `Seq` (and maybe
no `Process Group Ranks`) are matched within the groups the trace implies, or left unmatched with a note
(analysis/comm_groups.py), on planted truth (traceattr.builder.groups), by the TraceSet and the map-reduce
paths alike."""

from __future__ import annotations

import json

import numpy as np
import pytest

import traceattr
from traceattr import schema as S
from traceattr.analysis.check import WARN
from traceattr.analysis.collectives import _BUS_FACTOR, clock_alignment, comm_extract
from traceattr.analysis.comm_groups import NOT_ASKED, UNMATCHED, inferred_groups
from traceattr.builder.groups import GroupSetSpec, build_groups
from traceattr.io.decode import decode_file
from traceattr.io.limits import MAX_WORLD_SIZE

from test_collectives import alignment_of
from test_scale_mapreduce_comm import assert_same
from tracesets import checked

PAIRS = ["0,1", "2,3", "4,5", "6,7"]


def _matched(folder, **kw):
    truth = build_groups(GroupSetSpec(**kw), folder)
    rank_table = assert_same(folder)            # the map-reduce path equals the TraceSet's, table and notes
    traceset = traceattr.load(folder, cache=False, jobs=1)
    return truth, traceset, traceattr.collectives(traceset), rank_table


@pytest.mark.parametrize("named", ["nothing", "ranks", "ranks and name"])
def test_disjoint_pairs_match_within_their_group(tmp_path, named):
    """Four 2-rank groups, six all-reduces each at their own times, one clock: instances of 2 ranks, bus
    bandwidth with n = 2, no clock offsets, the planted wait and skew (was: 8-rank instances, n = 8, offsets
    of up to 600 µs "correcting" ranks that never differed)."""
    kw = {"ranks": dict(with_group_ranks=True),
          "ranks and name": dict(with_group_ranks=True, with_group_name=True)}.get(named, {})
    truth, traceset, instances, ranks = _matched(tmp_path, **kw)
    assert len(instances) == 24 and sorted(instances[S.RANKS]) == sorted(PAIRS * 6)
    assert set(instances[S.MATCHED_BY]) == {"order"} and set(instances[S.MISSING_RANKS]) == {""}
    by_first = sorted(truth.collectives, key=lambda c: min(c.arrival_ns.values()))
    assert list(instances[S.RANKS]) == [",".join(map(str, c.ranks)) for c in by_first]
    assert list(instances[S.ARRIVAL_SKEW_NS]) == [c.last_start_ns - min(c.arrival_ns.values()) for c in by_first]
    assert list(instances[S.WAIT_NS]) == [sum(c.wait_ns(r) for r in c.ranks) for c in by_first]
    assert list(instances[S.LAST_RANK]) == [c.last_rank for c in by_first]
    assert (instances[S.TRANSFER_NS] == 40_000).all()
    algbw = 1024 * 1024 / 40_000
    assert np.allclose(instances[S.ALGBW_GBPS], algbw)
    assert np.allclose(instances[S.BUSBW_GBPS], algbw * _BUS_FACTOR["allreduce"](2))     # n = 2, not 8
    # one clock planted: nothing to align, no offsets, zero residual
    alignment = alignment_of(traceset)
    assert not alignment.applied and alignment.residual_before_ns == 0
    assert set(alignment.offset_ns.values()) == {0}
    assert clock_alignment(comm_extract(traceset)) == alignment             # the check's own alignment
    assert instances.attrs["facts"]["clock alignment"].startswith("not needed")
    assert set(ranks[S.CLOCK_OFFSET_NS]) == {0}
    assert dict(zip(ranks[S.RANK], ranks[S.COMMUNICATION_WAIT_NS])) == truth.per_rank("wait_ns")
    assert dict(zip(ranks[S.RANK], ranks[S.COMMUNICATION_TRANSFER_NS])) == truth.per_rank("transfer_ns")
    told = [note for note in instances.attrs["notes"] if "told apart by their collectives' overlap" in note]
    assert len(told) == (named == "nothing")
    if told:
        assert told[0].startswith("48 communication activities carry a Group size (2)") and "4 group(s)" in told[0]
    findings = checked(traceset).findings
    assert (findings[findings["check"] == "clock_skew"]["verdict"] != WARN).all()


def test_groups_that_always_run_at_once_stay_unmatched(tmp_path):
    """Every group at the same instants: nothing tells who was with whom, so no instance pairs them (was:
    8-rank instances whose wait summed four groups' waits) and nothing is aligned on them."""
    _, traceset, instances, ranks = _matched(tmp_path, stagger_ns=0)
    assert len(instances) == 48 and set(instances[S.MATCHED_BY]) == {"unmatched"}
    assert not instances[S.RANKS].str.contains(",").any()
    assert (instances[S.WAIT_NS] == 0).all() and (instances[S.ARRIVAL_SKEW_NS] == 0).all()
    assert instances[S.BUSBW_GBPS].isna().all() and instances[S.ALGBW_GBPS].isna().all()
    assert instances.attrs["facts"] == {"collectives": "none shared by two or more ranks (no clock alignment)"}
    notes = instances.attrs["notes"]
    assert any(note.startswith("48 communication activities on 8 rank(s) (allreduce) left unmatched: their Group "
                               "size (2) is below the ranks that show them") for note in notes)
    assert not any("order of occurrence" in note for note in notes)        # none of them was matched by order
    assert (ranks[S.COMMUNICATION_WAIT_NS] == 0).all() and set(ranks[S.CLOCK_OFFSET_NS]) == {0}
    # with Process Group Ranks the same set is matched
    named = tmp_path / "named"
    build_groups(GroupSetSpec(stagger_ns=0, with_group_ranks=True), named)
    assert sorted(traceattr.collectives(named, jobs=1, cache=False)[S.RANKS]) == sorted(PAIRS * 6)


def test_a_rank_whose_clock_lands_in_another_group_is_not_paired(tmp_path):
    """Rank 1's clock 200 µs late puts its kernels beside group 2-3's: a chain of three ranks where the group
    has two, and rank 0 alone; both stay unmatched, the other groups are told. Rank 1 and 0 are never
    paired with the wrong rank, and no clock offset is invented."""
    _, traceset, instances, _ = _matched(tmp_path, clock_offset_ns={1: 200_000})
    paired = instances[instances[S.MATCHED_BY] == "order"]
    assert sorted(paired[S.RANKS]) == sorted(["4,5", "6,7"] * 6)
    left = instances[instances[S.MATCHED_BY] == "unmatched"]
    assert sorted(left[S.RANKS]) == sorted(["0", "1", "2", "3"] * 6)
    assert any(note.startswith("24 communication activities on 4 rank(s) (allreduce) left unmatched")
               for note in instances.attrs["notes"])
    assert set(alignment_of(traceset).offset_ns.values()) == {0}


def test_group_size_as_large_as_the_lane_changes_nothing(tmp_path):
    """Group size 8 over the 8 ranks of a lane: one group, matched by order as before (every rank in each
    instance), bandwidth with n = 8."""
    build_groups(GroupSetSpec(stagger_ns=0, skew_ns=0, group_size_arg=8), tmp_path)
    instances = traceattr.collectives(tmp_path, jobs=1, cache=False)
    assert len(instances) == 6 and set(instances[S.RANKS]) == {"0,1,2,3,4,5,6,7"}
    assert not any("told apart" in note or "unmatched" in note for note in instances.attrs["notes"])


def test_inferred_groups_on_columns():
    """The pairing alone: lanes a Group size does not narrow are not asked; a lane's ranks chained by overlap
    at every k are a group only with exactly that many ranks and a common instant at every k."""
    #            lane 0: pairs (0,1) and (2,3) at other times     lane 1: size 4 over 2 ranks: not asked
    lane = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 1])
    rank = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 1])
    k = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 0])
    start = np.array([0, 5, 100, 104, 200, 201, 300, 310, 0, 0])
    end = np.array([20, 20, 120, 120, 220, 220, 330, 330, 9, 9])
    size = np.array([2] * 8 + [4, 4])
    asked = np.ones(10, bool)
    found = inferred_groups(lane, rank, k, start, end, size, asked)
    assert (found[8:] == NOT_ASKED).all()
    assert found[0] == found[1] == found[4] == found[5] >= 0 and found[2] == found[3] == found[6] == found[7] >= 0
    assert found[0] != found[2]
    # at k = 1 ranks 1 and 2 touch: a chain of four at k = 1, pairs at k = 0: the pairs still hold
    touching = end.copy()
    touching[5] = 301
    assert inferred_groups(lane, rank, k, start, touching, size, asked)[0] >= 0
    # a chain 0-1-2 with no common instant, and rank 3 alone: nothing told
    chained = np.array([0, 10, 18, 500, 200, 210, 218, 700, 0, 0])
    chained_end = np.array([12, 20, 30, 510, 212, 220, 230, 710, 9, 9])
    assert (inferred_groups(lane, rank, k, chained, chained_end, size, asked)[:8] == UNMATCHED).all()
    # rows whose group is named are never asked
    assert (inferred_groups(lane, rank, k, start, end, size, np.zeros(10, bool)) == NOT_ASKED).all()


def _trace_with_group_sizes(tmp_path, sizes: list) -> str:
    events = []
    for i, size in enumerate(sizes):
        args = {"Collective name": "allreduce", "In msg nelems": 4, "Out msg nelems": 4, "dtype": "Float"}
        if size is not ...:
            args["Group size"] = size
        events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0,
                       "tid": 7, "ts": 1000 + 10 * i, "dur": 5, "args": args})
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": events}))
    return str(path)


@pytest.mark.parametrize("pure", ["1", "0"])
def test_group_size_is_decoded_and_range_checked(tmp_path, monkeypatch, pure):
    """`Group size` becomes the device rows' group_size (both decoders); outside 1..MAX_WORLD_SIZE it reads
    as absent with a note naming the first, as an arg of an unexpected type does."""
    monkeypatch.setenv("TRACEATTR_PURE_PYTHON", pure)
    good = decode_file(_trace_with_group_sizes(tmp_path, [2, 1, MAX_WORLD_SIZE, ...]))
    assert good.device.column(S.GROUP_SIZE).to_pylist() == [2, 1, MAX_WORLD_SIZE, -1] and not good.notes
    odd = decode_file(_trace_with_group_sizes(tmp_path, [0, -3, MAX_WORLD_SIZE + 1, 2**63 - 1, 4]))
    assert odd.device.column(S.GROUP_SIZE).to_pylist() == [-1, -1, -1, -1, 4]
    assert [note.split(": ", 1)[1] for note in odd.notes] == [
        f"4 event args of an unexpected value read as absent (first: `Group size` 0, outside 1..{MAX_WORLD_SIZE:,})"]
    typed = decode_file(_trace_with_group_sizes(tmp_path, ["2", 2.5, True, None, 3]))
    assert typed.device.column(S.GROUP_SIZE).to_pylist() == [-1, -1, -1, -1, 3]
    assert len(typed.notes) == 1 and "4 event args of an unexpected type read as absent" in typed.notes[0]


def test_a_store_keeps_group_sizes_and_matches_alike(tmp_path):
    """group_size travels through `convert` (store version 5): the store's instances are the traces'."""
    from traceattr.io.store import write_store

    build_groups(GroupSetSpec(), tmp_path / "traces")
    store = write_store(traceattr.load(tmp_path / "traces", cache=False, jobs=1), tmp_path / "store")
    from_store = traceattr.collectives(str(store), jobs=1, cache=False)
    from_traces = traceattr.collectives(str(tmp_path / "traces"), jobs=1, cache=False)
    assert sorted(from_store[S.RANKS]) == sorted(PAIRS * 6)
    assert from_store.equals(from_traces) and from_store.attrs == from_traces.attrs
