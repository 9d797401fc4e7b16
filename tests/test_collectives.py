"""Collectives across ranks, clock alignment, wait vs transfer and the straggler, on planted truth
(traceattr.builder.multirank) and on the real multi-rank traces."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import traceattr
from traceattr import schema as S
from traceattr.analysis import straggler as G
from traceattr.analysis.collectives import _BUS_FACTOR, clock_alignment, comm_extract, match_extract, parse_ranks
from traceattr.attribution import columns as C
from traceattr.attribution.sweep import sweep
from traceattr.builder.multirank import EXTRA_KERNEL, EXTRA_MODULE, MultiRankSpec, build_multirank

from clirun import run_cli
from conftest import shared_trace

OFFSETS = {1: 37_000, 2: -2_500_000_000, 3: 480_000}        # tens of µs to seconds


def _load(tmp_path, **kw):
    truth = build_multirank(MultiRankSpec(**kw), tmp_path)
    ts = traceattr.load(tmp_path, cache=False, jobs=1)
    sweep(ts).self_check()
    return ts, truth


def alignment_of(ts):
    """The clock alignment the engine's driver finds: match_extract over every file's communication rows."""
    return match_extract(comm_extract(ts), set(ts.ranks))[2]


def _check_conservation(ts, align=True):
    """wait + transfer == communication self time per (rank, device); Σ instance wait == Σ wait caused;
    the check's clock alignment alone (clock_alignment, from a few columns) is the matching's own."""
    if align:
        assert clock_alignment(comm_extract(ts)) == alignment_of(ts)
    table = traceattr.summarize(ts, by="rank", align=align)
    assert (table[S.COMMUNICATION_WAIT_NS] + table[S.COMMUNICATION_TRANSFER_NS] == table[C.COMMUNICATION_NS]).all()
    assert (table[[S.COMMUNICATION_WAIT_NS, S.COMMUNICATION_TRANSFER_NS]] >= 0).all().all()
    instances = traceattr.collectives(ts, align=align)
    shared = instances[instances[S.LAST_RANK] >= 0]
    assert int(shared[S.WAIT_NS].sum()) == int(table[S.WAIT_CAUSED_NS].sum())
    # a late arrival is one after another rank's: an exact tie (skew 0) has a last rank by tie-break only
    assert int(table[S.LATE_ARRIVALS].sum()) == int((shared[S.ARRIVAL_SKEW_NS] > 0).sum())
    return table, instances


def test_planted_offsets_late_rank_p2p_and_truncation(tmp_path):
    ts, truth = _load(tmp_path, ranks=4, steps=3, clock_offset_ns=OFFSETS, extra_compute_ns={2: 70_000},
                      p2p=True, truncated={3: 1})
    table, instances = _check_conservation(ts)
    # offsets exactly (no jitter planted), against rank 0
    alignment = alignment_of(ts)
    assert alignment.applied and alignment.residual_after_ns == 0
    assert alignment.offset_ns == {0: 0, **OFFSETS}
    assert dict(zip(table[S.RANK], table[S.CLOCK_OFFSET_NS])) == {0: 0, **OFFSETS}
    # every collective matched: 3 all-reduces (group + seq) and 3 send/recv pairs
    assert sorted(instances[S.MATCHED_BY]) == ["group+seq"] * 3 + ["p2p"] * 3
    assert list(instances[S.LAST_RANK]) == [c.last_rank for c in truth.collectives]
    assert list(instances[S.ARRIVAL_SKEW_NS]) == [c.last_start_ns - min(c.arrival_ns.values()) for c in truth.collectives]
    # the truncated rank is reported, not dropped
    assert list(instances[S.MISSING_RANKS]) == ["", "", "", "", "3", ""]
    assert any("lack rank(s) 3" in note for note in instances.attrs["notes"])
    # wait and transfer per rank, exactly
    assert dict(zip(table[S.RANK], table[S.COMMUNICATION_WAIT_NS])) == truth.per_rank("wait_ns")
    assert dict(zip(table[S.RANK], table[S.COMMUNICATION_TRANSFER_NS])) == truth.per_rank("transfer_ns")
    caused = truth.wait_caused_ns()
    assert dict(zip(table[S.RANK], table[S.WAIT_CAUSED_NS])) == {r: caused.get(r, 0) for r in range(4)}
    # bandwidth, as nccl-tests defines it
    first = instances.iloc[0]
    assert first[S.BYTES] == 4 * 1024 * 1024 and first[S.TRANSFER_NS] == 50_000
    assert first[S.ALGBW_GBPS] == pytest.approx(4 * 1024 * 1024 / 50_000)
    assert first[S.BUSBW_GBPS] == pytest.approx(first[S.ALGBW_GBPS] * 2 * 3 / 4)
    # the straggler: rank 2, by extra compute, with the kernel and op that carry it
    verdict = traceattr.imbalance(ts)
    assert verdict.rank == 2 and verdict.cause == G.COMPUTE
    assert verdict.wait_caused_ns == caused[2]
    assert verdict.deltas == {"compute_ns": 3 * 70_000, "host_bound_idle_ns": 0, "launch_gap_ns": 0}
    # notes are prose: the kernel by its short display name (the tables keep the full one)
    assert "kernel extra_attention_kernel<float> +210 µs" in verdict.details and "op aten::extra_attention +210 µs" in verdict.details
    assert verdict.modules == [f"module {EXTRA_MODULE} +210 µs"]


def test_offsets_within_planted_jitter(tmp_path):
    ts, _ = _load(tmp_path, ranks=4, steps=8, clock_offset_ns=OFFSETS, end_jitter_ns=3_000, seed=4)
    alignment = alignment_of(ts)
    assert alignment.applied and alignment.residual_after_ns <= 3_000 < alignment.residual_before_ns
    assert clock_alignment(comm_extract(ts)) == alignment
    for rank, planted in OFFSETS.items():
        assert abs(alignment.offset_ns[rank] - planted) <= 3_000
    _check_conservation(ts)


def test_host_bound_straggler(tmp_path):
    ts, truth = _load(tmp_path, ranks=4, steps=3, clock_offset_ns=OFFSETS, host_stall_ns={1: 300_000})
    verdict = traceattr.imbalance(ts)
    assert verdict.rank == 1 and verdict.cause == G.HOST_BOUND
    assert verdict.deltas == {"compute_ns": 0, "host_bound_idle_ns": 3 * 300_000, "launch_gap_ns": 0}
    assert verdict.details[0] == "host op aten::_host_stall ran 900 µs while the device idled"
    assert verdict.wait_caused_ns == truth.wait_caused_ns()[1]
    _check_conservation(ts)


def test_late_launch_straggler(tmp_path):
    ts, truth = _load(tmp_path, ranks=5, steps=3, late_launch_ns={3: 800_000})
    verdict = traceattr.imbalance(ts)
    assert verdict.rank == 3 and verdict.cause == G.LATE_LAUNCH
    lateness = sum(c.arrival_ns[3] - sorted(c.arrival_ns.values())[2] for c in truth.collectives)
    assert verdict.deltas == {"compute_ns": 0, "host_bound_idle_ns": 0, "launch_gap_ns": lateness}
    assert verdict.details[0].startswith("host op aten::_late_host_work ran ")


def test_busiest_rank_is_not_the_straggler(tmp_path):
    """The user's case from the issue: the rank that waits is busiest; the one that arrives last is not."""
    ts, _ = _load(tmp_path, ranks=3, steps=3, late_launch_ns={0: 900_000}, transfer_ns=20_000)
    by_rank = traceattr.summarize(ts, by="rank")
    busiest = int(by_rank.loc[by_rank[S.BUSY_NS].idxmax(), S.RANK])
    verdict = traceattr.imbalance(ts)
    assert verdict.rank == 0 and busiest != 0


def test_order_matching_without_group_info(tmp_path):
    ts, truth = _load(tmp_path, ranks=3, steps=3, clock_offset_ns={1: 90_000, 2: 5_000}, with_seq=False,
                      extra_compute_ns={1: 40_000})
    instances = traceattr.collectives(ts)
    assert set(instances[S.MATCHED_BY]) == {"order"}
    assert any("matched by order" in note for note in instances.attrs["notes"])
    assert list(instances[S.LAST_RANK]) == [c.last_rank for c in truth.collectives]
    assert traceattr.imbalance(ts).rank == 1
    _check_conservation(ts)


def test_no_align_keeps_raw_clocks(tmp_path):
    ts, truth = _load(tmp_path, ranks=2, steps=2, clock_offset_ns={1: 2_000_000})
    raw = traceattr.collectives(ts, align=False)
    assert raw.attrs["facts"]["clock alignment"].startswith("off (--no-align)")
    assert (raw[S.ARRIVAL_SKEW_NS] >= 1_900_000).all()          # the planted offset shows as skew
    aligned = traceattr.collectives(ts)
    assert list(aligned[S.ARRIVAL_SKEW_NS]) == [c.last_start_ns - min(c.arrival_ns.values()) for c in truth.collectives]
    # per-device busy and self never move with alignment
    a, b = (traceattr.summarize(ts, by="rank", align=flag) for flag in (True, False))
    assert a[S.BUSY_NS].tolist() == b[S.BUSY_NS].tolist()
    assert a[C.COMMUNICATION_NS].tolist() == b[C.COMMUNICATION_NS].tolist()
    _check_conservation(ts, align=False)


def test_top_and_aggregate(tmp_path):
    ts, _ = _load(tmp_path, ranks=4, steps=4, extra_compute_ns={2: 30_000}, p2p=True)
    full = traceattr.collectives(ts)
    top = traceattr.collectives(ts, top=2)
    assert len(top) == 3 and top[S.COLLECTIVE].iloc[-1] == "<other>"
    assert int(top[S.WAIT_NS].sum()) == int(full[S.WAIT_NS].sum())
    assert top.dtypes.equals(full.dtypes)             # the <other> row turned the text columns to object
    agg = traceattr.collectives(ts, aggregate=True)
    assert sorted(agg[S.COLLECTIVE]) == ["allreduce", "sendrecv"] and agg[S.COUNT].sum() == len(full)
    assert int(agg[S.WAIT_NS].sum()) == int(full[S.WAIT_NS].sum())
    row = agg[agg[S.COLLECTIVE] == "allreduce"].iloc[0]
    assert row["skew_p50_ns"] == 30_000 and row["transfer_mean_ns"] == 50_000 and row[S.COUNT] == 4


def test_cli_by_collective_and_rank(tmp_path):
    # four steps: last at 2 of 2 among 3 ranks is what chance alone does 1 time in 3 (not named)
    build_multirank(MultiRankSpec(ranks=3, steps=4, clock_offset_ns={2: 70_000}, host_stall_ns={2: 200_000}),
                    tmp_path)
    out = run_cli("summarize", tmp_path, "--by", "rank", "--format", "markdown", "--no-cache", "-q", "-v")
    assert out.returncode == 0, out.stderr
    assert "straggler: rank 2: made the others wait" in out.stdout and "host-bound" in out.stdout
    assert "clock alignment: applied" in out.stdout and "communication by rule: collective arg" in out.stdout
    out = run_cli("summarize", tmp_path, "--by", "collective", "--format", "json", "--no-cache", "-q")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r[S.LAST_RANK] for r in rows] == [2, 2, 2, 2]
    out = run_cli("summarize", tmp_path, "--comm-pattern", "(bad", "--no-cache", "-q")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--comm-pattern" in out.stderr


def test_single_rank_and_host_only_have_no_collectives(tmp_path):
    ts, _ = _load(tmp_path, ranks=1, steps=2)
    instances = traceattr.collectives(ts)
    assert (instances[S.LAST_RANK] == -1).all() and instances[S.WAIT_NS].sum() == 0
    assert "none shared" in instances.attrs["facts"]["collectives"]
    assert traceattr.imbalance(ts).rank == -1
    host_only = traceattr.load(shared_trace("torch213_cpu/dist2"), cache=False, jobs=1)
    assert traceattr.collectives(host_only).empty
    table = traceattr.summarize(host_only, by="rank")
    assert (table[S.COMMUNICATION_WAIT_NS] == 0).all() and traceattr.imbalance(host_only).rank == -1


def test_malformed_group_ranks_read_as_unknown(tmp_path):
    build_multirank(MultiRankSpec(ranks=2, steps=2), tmp_path)
    path = tmp_path / "rank1.pt.trace.json"
    path.write_text(path.read_text().replace('"Process Group Ranks": "[0, 1]"', '"Process Group Ranks": "[0, x"'))
    ts = traceattr.load(tmp_path, cache=False, jobs=1)
    instances = traceattr.collectives(ts)
    assert any("unreadable Process Group Ranks" in note for note in instances.attrs["notes"])
    assert list(instances[S.RANKS]) == ["0,1", "0,1"] and (instances[S.MISSING_RANKS] == "").all()
    assert parse_ranks("[0, 1, 2]") == (0, 1, 2) and parse_ranks("[1, 1]") is None and parse_ranks("") is None


def test_bus_factors_follow_nccl_tests():
    # the factors busbw_gbps applies (the table's own test: test_planted_offsets_late_rank_p2p_and_truncation)
    assert _BUS_FACTOR["allreduce"](8) == pytest.approx(14 / 8)
    assert _BUS_FACTOR["allgather"](8) == _BUS_FACTOR["reducescatter"](8) == pytest.approx(7 / 8)
    assert _BUS_FACTOR["broadcast"](8) == _BUS_FACTOR["sendrecv"](2) == 1.0
    assert "deep_ep::intranode::dispatch" not in _BUS_FACTOR        # no factor: busbw is nan


def test_real_trace_filter_every_collective_matched():
    ts = traceattr.load(shared_trace("trace_filter"), cache=False, jobs=1)
    table, instances = _check_conservation(ts)
    assert len(instances) == 10 and (instances[S.RANKS] == "0,1").all() and (instances[S.MISSING_RANKS] == "").all()
    verdict = traceattr.imbalance(ts)
    assert verdict.rank == 1 and verdict.cause == G.HOST_BOUND      # docs/collectives.md states the numbers
    assert verdict.wait_caused_ns == int(table.loc[table[S.RANK] == 1, S.WAIT_CAUSED_NS].sum())


def test_real_nccl_parser_config_reports_the_absent_rank():
    ts = traceattr.load(shared_trace("nccl_parser_config"), cache=False, jobs=1)
    _, instances = _check_conservation(ts)
    assert len(instances) == 21 and (instances[S.MISSING_RANKS] == "1").all()
    assert sorted(set(instances[S.COLLECTIVE])) == ["allreduce", "broadcast"]
    assert any("no trace loaded" in note for note in instances.attrs["notes"])
    assert pd.notna(instances[S.ALGBW_GBPS]).all()


def test_no_align_with_a_level_it_does_not_change_is_refused():
    """Found by a docs trial: `--by kernel --no-align` exited 0 and changed nothing, while `--aggregate` with
    the wrong --by is refused."""
    from traceattr.errors import TraceInputError
    from traceattr.pipelines.summarize import summary_report

    path = str(Path(__file__).parent.parent / "sample_traces" / "synthetic_2rank")
    for by in ("kernel", "step", "op"):
        with pytest.raises(TraceInputError, match="--no-align needs --by rank or collective"):
            summary_report(path, by=by, align=False, cache=False)


def test_cached_answers_keep_the_multirank_options_apart(tmp_path):
    from click.testing import CliRunner

    from traceattr.cli import main
    build_multirank(MultiRankSpec(ranks=2, steps=2, clock_offset_ns={1: 3_000_000}), tmp_path / "run")
    args = ["summarize", str(tmp_path / "run"), "--by", "collective", "--format", "csv", "-q",
            "--cache-dir", str(tmp_path / "cache")]
    runner = CliRunner()
    skews = []
    for extra in ([], ["--no-align"], [], ["--no-align"]):       # the second pair is answered from the cache
        result = runner.invoke(main, args + extra)
        assert result.exit_code == 0, result.output
        skews.append(pd.read_csv(io.StringIO(result.stdout))[S.ARRIVAL_SKEW_NS].tolist())   # notes: stderr
    assert skews[0] == skews[2] == [0, 0] and skews[1] == skews[3] == [3_000_000, 3_000_000]


def test_check_warns_on_clock_skew_beyond_the_residual_and_not_on_aligned_clocks(tmp_path):
    """`traceattr check`'s clock_skew row: planted offsets beyond the end jitter are named with their size;
    the same run with no offsets has no finding."""
    from traceattr.analysis.check import WARN
    from tracesets import checked

    ts, _ = _load(tmp_path / "skewed", ranks=4, steps=3, clock_offset_ns=OFFSETS, end_jitter_ns=1_000, seed=2)
    rows = checked(ts).findings
    skew = rows[rows["check"] == "clock_skew"].iloc[0]
    assert skew["verdict"] == WARN and skew[S.COUNT] == len(OFFSETS)
    assert abs(skew["time_ns"] - 2_500_000_000) <= 1_000              # the largest planted offset
    assert "rank 2 -2,500,0" in skew["detail"]
    ts, _ = _load(tmp_path / "aligned", ranks=4, steps=3, end_jitter_ns=1_000, seed=2)
    rows = checked(ts).findings
    assert (rows[rows["check"] == "clock_skew"]["verdict"] != WARN).all()


def test_group_rank_texts_stay_one_object_per_distinct_text():
    """`Process Group Ranks` lists every rank of the group (kilobytes per row at 1024 ranks): the driver's
    comm frame and the instance matching must share one text and one parsed tuple per distinct value, never
    a copy per row (the command's driver once peaked at 820 MB on 1024 x 10 MB files for those copies)."""
    from traceattr.analysis.collectives import COMM_COLUMNS, ROW, comm_frame, match_extract

    text = "[" + ", ".join(map(str, range(1024))) + "]"
    rows = 6
    columns = {name: np.zeros(rows, np.int64) for name in COMM_COLUMNS}
    columns.update({S.NAME: np.array(["ncclDevKernel_AllReduce_Sum_f32_RING_LL"] * rows, object),
                    S.COLLECTIVE: np.array(["allreduce"] * rows, object),
                    S.PROCESS_GROUP: np.array(["0"] * rows, object),
                    S.GROUP_RANKS: np.array([text] * rows, object),
                    S.RANK: np.repeat([0, 1], 3), S.SEQ: np.tile([1, 2, 3], 2),
                    S.START_NS: np.arange(rows) * 10, S.END_NS: np.arange(rows) * 10 + 5,
                    S.SRC_RANK: np.full(rows, -1), S.DST_RANK: np.full(rows, -1),
                    ROW: np.arange(rows), S.SELF_NS: np.full(rows, 5)})
    frame = comm_frame(columns)
    texts = frame[S.GROUP_RANKS].tolist()
    assert texts[0] == text and all(t is texts[0] for t in texts)
    keyed = match_extract(frame, {0, 1})[0]
    expected = keyed["expected"].tolist()
    assert expected[0] == tuple(range(1024)) and all(e is expected[0] for e in expected)


def test_missing_ranks_note_stays_one_short_line():
    """At 1024 ranks a note listed every absent rank (700 numbers); runs and a count instead."""
    from traceattr.analysis.collectives import rank_ranges
    assert rank_ranges([3]) == "3" and rank_ranges([5, 3]) == "3, 5"
    assert rank_ranges([3, *range(307, 1000)]) == "3, 307-999 (694 ranks)"
    assert rank_ranges(list(range(0, 100, 2))) == "0, 2, 4, 6, 8, 10, 12, 14, ... +42 more (50 ranks)"



def test_map_reduce_comm_rows_keep_one_text_per_distinct_group(tmp_path):
    """The multi-rank map-reduce's pile of communication rows (multirank_plan.CommPile) hands match_extract
    one `Process Group Ranks` object per distinct text, as comm_frame does: a frame inferring arrow strings
    copied the text into every row (+330 KB a file on the driver at 1024 ranks)."""
    import pickle

    import pyarrow as pa

    from traceattr.analysis.multirank_plan import CommPile, file_extract
    from traceattr.engine.placement import Placement
    from traceattr.builder import TraceSpec, write_trace

    write_trace(tmp_path / "rank0.pt.trace.json", TraceSpec(ranks=(0, 1), world_size=64, steps=3), 0)
    found = file_extract(traceattr.load(tmp_path / "rank0.pt.trace.json"))
    pile = CommPile()
    for index in range(2):          # two files, each as it arrives on the driver
        pile.update(index, pickle.loads(pickle.dumps(found)))
    placement = Placement(pa.table({}), (), np.array([0, 1, -1]), np.array([0, 0, -1]), ("a", "b"))
    frame = pile.finalize(placement).frame
    texts = frame[S.GROUP_RANKS].tolist()
    assert len(texts) >= 6 and texts[0] == str(list(range(64))) and all(t is texts[0] for t in texts)


def test_group_medians_spreads_and_keys_equal_pandas_group_bys():
    """The alignment's numpy group medians and spreads against pandas' group-bys (ties, even and odd
    counts), and the occurrence keys against a groupby cumcount, on random data."""
    from traceattr.analysis.collectives import _group_median, _occurrence_keys, _spreads

    rng = np.random.default_rng(7)
    for trial in range(300):
        rows, groups = int(rng.integers(1, 300)), int(rng.integers(1, 40))
        group = np.unique(rng.integers(0, groups, rows), return_inverse=True)[1]
        values = (rng.integers(-5, 5, rows) * float(rng.choice([1, 0.5, 1e9, 997.25]))).astype(np.float64)
        n = int(group.max()) + 1
        grouped = pd.Series(values).groupby(group)
        assert np.array_equal(_group_median(values, group, n), grouped.median().to_numpy()), trial
        assert np.array_equal(_spreads(values, group, n), (grouped.max() - grouped.min()).to_numpy()), trial
        rank, base = rng.integers(0, 6, rows), rng.integers(0, 5, rows)
        cumcount = pd.DataFrame({"r": rank, "b": base}).groupby(["r", "b"], sort=False).cumcount().to_numpy()
        expected = pd.factorize(base * (int(cumcount.max(initial=0)) + 1) + cumcount)[0]
        assert np.array_equal(_occurrence_keys(rank, base), expected), trial


def test_offsets_exact_when_groups_share_more_among_themselves(tmp_path):
    """Pairs of ranks all-reduce among themselves after each all-reduce of all ranks (tensor-parallel pairs
    under data parallelism), with a send/recv between ranks 0 and 1: each rank shares twice as many
    collectives within its pair as with the rest. From zero offsets the alternating medians left a pair's
    common clock shift in place (a pair's shift moves no rank's median); grown from the reference rank the
    offsets are exact, and so are skews, waits and the straggler."""
    offsets = {2: 302_038, 3: 140_266, 4: -203_330, 6: 355_641, 7: 1_500_000_000}
    ts, truth = _load(tmp_path, ranks=8, steps=7, subgroup_size=2, p2p=True, clock_offset_ns=offsets,
                      extra_compute_ns={5: 300_000})
    alignment = alignment_of(ts)
    assert alignment.applied and alignment.offset_ns == {r: offsets.get(r, 0) for r in range(8)}
    assert alignment.residual_after_ns == 0 and alignment.residual_max_ns == 0
    assert _truth_matches(ts, truth, 8) == []
    assert traceattr.imbalance(ts).rank == 5
    assert sorted(set(traceattr.collectives(ts)[S.PROCESS_GROUP])) == ["", "0", "1", "2", "3", "4"]


def _truth_matches(ts, truth, ranks: int) -> list[str]:
    """What differs between the matched collectives, the rank table and the straggler, and the planted
    truth (an instance with one participant present has no last rank)."""
    problems = []
    table, instances = _check_conservation(ts)
    if len(instances) != len(truth.collectives):
        return [f"{len(instances)} instances, {len(truth.collectives)} planted"]
    # instances are listed by time, the truth by kind within a step: compare them as sets
    want = sorted((c.last_rank if len(c.ranks) > 1 else -1, c.last_start_ns - min(c.arrival_ns.values()))
                  for c in truth.collectives)
    got = sorted(zip(instances[S.LAST_RANK].tolist(), instances[S.ARRIVAL_SKEW_NS].tolist()))
    if got != want:
        problems.append(f"(last rank, skew) {got} != {want}")
    caused = truth.wait_caused_ns()
    for name, want in ((S.COMMUNICATION_WAIT_NS, truth.per_rank("wait_ns")),
                       (S.COMMUNICATION_TRANSFER_NS, truth.per_rank("transfer_ns")),
                       (S.WAIT_CAUSED_NS, {r: caused.get(r, 0) for r in range(ranks)})):
        got = dict(zip(table[S.RANK], table[name]))
        if {r: got.get(r, 0) for r in want} != want:
            problems.append(f"{name} {got} != {want}")
    most = max(caused.values(), default=0)
    expected = [r for r, ns in caused.items() if ns == most and ns > 0] or [-1]
    if traceattr.imbalance(ts).rank not in expected:
        problems.append(f"straggler {traceattr.imbalance(ts).rank}, planted {expected}")
    return problems


def test_rank_off_in_few_collectives_is_aligned(tmp_path):
    """A rank whose clock is 1.8 s off and whose window stops after the first of three collectives: the
    median spread over all instances is 0 raw and aligned, yet its one instance is 1.8 s apart. Its offset
    must still be applied (before: the skew read 1.8 s, the truncated rank 'caused' 1.5 ms of wait and the
    real straggler's wait was wrong), and the check names the skew."""
    from traceattr.analysis.check import WARN
    from tracesets import checked

    ts, truth = _load(tmp_path, ranks=4, steps=3, clock_offset_ns={1: 1_781_924_818}, compute_kernels=2,
                      transfer_ns=20_000, late_launch_ns={2: 900_000}, truncated={1: 2}, seed=115)
    alignment = alignment_of(ts)
    assert alignment.applied and alignment.offset_ns == {0: 0, 1: 1_781_924_818, 2: 0, 3: 0}
    assert (alignment.residual_before_ns, alignment.residual_after_ns) == (0, 0)
    assert alignment.residual_max_raw_ns == 1_781_924_818 and alignment.residual_max_ns == 0
    assert _truth_matches(ts, truth, 4) == []
    assert traceattr.imbalance(ts).rank == 2
    rows = checked(ts).findings
    skew = rows[rows["check"] == "clock_skew"].iloc[0]
    assert skew["verdict"] == WARN and skew["time_ns"] == 1_781_924_818 and "rank 1 +1,781,924,818" in skew["detail"]


def test_random_multirank_sets_match_planted_truth(tmp_path):
    """Random builder sets (2-7 ranks, clock offsets from none to seconds, a rank with extra compute, a host
    stall or a late launch, send/recv pairs, subgroups, no group info, a truncated rank) against their planted
    truth:
    every instance's last rank and skew, wait/transfer and wait caused per rank, the straggler.
    12 of the first 24 seeds, the cheapest set (Σ ranks x steps 103 of 284) that still plants each feature
    below at least twice, as all 24 did (a seed costs ~0.2-1.5 s of engine calls); the last line checks that
    they still do."""
    import collections
    import random

    planted = collections.Counter()
    for seed in (2, 6, 7, 9, 10, 12, 14, 15, 18, 19, 20, 23):
        rng = random.Random(seed)
        ranks, steps = rng.randint(2, 7), rng.randint(1, 5)
        offsets = {r: rng.choice([0, rng.randint(-3 * 10**9, 3 * 10**9), rng.randint(-500_000, 500_000)])
                   for r in range(1, ranks) if rng.random() < 0.6}
        plant = {rng.choice(["extra_compute_ns", "host_stall_ns", "late_launch_ns"]):
                 {rng.randrange(ranks): rng.choice([60_000, 200_000, 900_000])}} if rng.random() < 0.8 else {}
        if steps > 1 and rng.random() < 0.3:
            plant["truncated"] = {rng.randrange(ranks): rng.randint(1, steps - 1)}
        folder = tmp_path / str(seed)
        with_seq = rng.random() < 0.8       # without group info, order matching cannot tell subgroups apart
        p2p, subgroup = rng.random() < 0.4, rng.choice([0, 2, 3]) * with_seq
        ts, truth = _load(folder, ranks=ranks, steps=steps, clock_offset_ns=offsets, seed=seed, p2p=p2p,
                          with_seq=with_seq, subgroup_size=subgroup, transfer_ns=rng.choice([20_000, 50_000]),
                          compute_kernels=rng.randint(1, 4), **plant)
        assert _truth_matches(ts, truth, ranks) == [], (seed, offsets, plant)
        planted.update([*plant, f"{ranks} ranks", f"subgroups of {subgroup}"] + ["p2p"] * p2p
                       + ["no group info"] * (not with_seq)
                       + ["seconds off"] * any(abs(v) > 10**6 for v in offsets.values())
                       + ["µs off"] * any(0 < abs(v) <= 500_000 for v in offsets.values()))
    features = {"extra_compute_ns", "host_stall_ns", "late_launch_ns", "truncated", "seconds off", "µs off", "p2p",
                "no group info", "subgroups of 2", "subgroups of 3", *(f"{n} ranks" for n in range(2, 8))}
    assert min(planted[feature] for feature in features) >= 2, planted


def test_collectives_and_imbalance_take_a_path(tmp_path):
    """Both raised AttributeError ('str' object has no attribute 'device') on a path, which summarize and
    attribute take; the path's answers are the loaded TraceSet's."""
    ts, truth = _load(tmp_path, ranks=4, steps=3, extra_compute_ns={2: 40_000}, clock_offset_ns={3: 70_000})
    for kw in ({}, {"top": 1}, {"aggregate": True}, {"align": False}):
        on_path = traceattr.collectives(str(tmp_path), cache=False, jobs=1, **kw)
        assert on_path.equals(traceattr.collectives(ts, **kw)), kw
    on_path = traceattr.imbalance(str(tmp_path), cache=False, jobs=1)
    assert on_path.rank == 2 == traceattr.imbalance(ts).rank
    assert on_path.summary() == traceattr.imbalance(ts).summary()


def test_clock_skew_is_not_warned_on_noise_level_offsets(tmp_path):
    """Found on planted truth: with identical clocks and collective ends jittered by a few µs, check warned
    clock_skew (exit 1) on offset estimates of ~100 ns (13 of 60 clean sets; point-to-point pairs end
    together, so the residual was 0 and any estimate warned). A 50 µs planted offset is still named."""
    from traceattr.analysis.check import WARN
    from tracesets import checked

    for seed in range(6):
        ts, _ = _load(tmp_path / f"clean{seed}", ranks=4, steps=4, end_jitter_ns=3_000, p2p=seed % 2 == 0, seed=seed)
        rows = checked(ts).findings
        assert (rows[rows["check"] == "clock_skew"]["verdict"] != WARN).all(), seed
    ts, _ = _load(tmp_path / "skewed", ranks=4, steps=4, clock_offset_ns={3: 50_000}, end_jitter_ns=3_000, seed=1)
    rows = checked(ts).findings
    skew = rows[rows["check"] == "clock_skew"].iloc[0]
    assert skew["verdict"] == WARN and "rank 3 +5" in skew["detail"]


def test_a_straggler_is_named_only_when_consistent(tmp_path):
    """Found on planted truth: with only 1-10% compute jitter and no straggler, a straggler was named (with
    a compute cause) on 40 of 40 sets, e.g. last at 1 of 8 collectives among 64 ranks. Now the verdict says
    how often it was last and that chance alone does that; a planted straggler is still named, with its cause."""
    for seed in range(4):
        noise = traceattr.imbalance(_load(tmp_path / f"noise{seed}", ranks=16, steps=8, compute_jitter=0.05,
                                          seed=seed)[0])
        assert noise.shared == 8 and noise.chance >= 0.1 and not noise.consistent, noise.summary()
        assert "not a consistent straggler" in noise.summary() and "vs median" not in noise.summary()
        planted = traceattr.imbalance(_load(tmp_path / f"planted{seed}", ranks=16, steps=8, compute_jitter=0.05,
                                            extra_compute_ns={5: 60_000}, seed=seed)[0])
        assert planted.rank == 5 and planted.consistent and planted.cause == G.COMPUTE, planted.summary()
        assert "(of 8)" in planted.summary()
    # three of three among four ranks is named; two ranks over three steps cannot be told from chance
    assert traceattr.imbalance(_load(tmp_path / "four", ranks=4, steps=3, extra_compute_ns={2: 40_000})[0]).consistent
    pair = traceattr.imbalance(_load(tmp_path / "pair", ranks=2, steps=3, extra_compute_ns={1: 40_000})[0])
    assert pair.rank == 1 and not pair.consistent and pair.chance == pytest.approx(0.25)
    # ... and says so, with the cause it measured, rather than calling a 3-of-3 straggler noise
    assert pair.too_few and pair.cause == G.COMPUTE and "too few collectives to test" in pair.summary()


def test_collectives_of_one_step_are_not_independent_evidence(tmp_path):
    """Found on planted truth: with two collectives a step (a sub-group all-reduce beside the full one),
    noise alone was a 'consistent' straggler with a cause in 13 of 40 sets (a rank late in a step is last at
    both), and the cause's detail notes were printed for a verdict without a cause."""
    for seed in range(4):
        ts = _load(tmp_path / f"noise{seed}", ranks=16, steps=8, compute_jitter=0.05, subgroup_size=4, seed=seed)[0]
        noise = traceattr.imbalance(ts)
        assert noise.shared == 16 and noise.steps == 8 and not noise.consistent and not noise.shows_cause, \
            noise.summary()
        notes = traceattr.summarize(ts, by="rank").attrs["notes"]
        assert not any(note.startswith("straggler rank") for note in notes), notes
        planted = traceattr.imbalance(_load(tmp_path / f"planted{seed}", ranks=16, steps=8, compute_jitter=0.05,
                                            subgroup_size=4, extra_compute_ns={5: 60_000}, seed=seed)[0])
        assert planted.rank == 5 and planted.consistent and planted.cause == G.COMPUTE, planted.summary()


def test_order_matching_with_a_rank_short_of_collectives_says_it_is_unreliable(tmp_path):
    """Found on planted truth: without Seq, one rank's dropped collective record shifted its later
    collectives by one instance (absorbed as a one-step clock offset, residual 0); the note blamed 'a
    truncated window or a hang?' and the straggler could be wrong. The note now says what order matching
    does with a gap."""
    ts, _ = _load(tmp_path, ranks=3, steps=4, with_seq=False, truncated={2: 3})
    notes = traceattr.collectives(ts).attrs["notes"]
    assert any("lack rank(s) 2 (matched by order" in note and "are unreliable" in note for note in notes), notes


def test_no_straggler_verdict_without_a_collective_shared_by_two_ranks(tmp_path):
    """Found by a review: one rank of four loaded printed 'straggler: no straggler: no rank made another wait',
    a verdict one rank cannot give. Planted: balanced ranks (no straggler, every collective shared) and the
    same run with one rank's file alone; by the API and the command (map-reduce)."""
    build_multirank(MultiRankSpec(ranks=4, steps=3), tmp_path / "all")
    (tmp_path / "one").mkdir()
    one = sorted((tmp_path / "all").iterdir())[0]
    (tmp_path / "one" / one.name).write_bytes(one.read_bytes())
    for folder, expected in (("all", "no straggler: no rank made another wait at a collective (of 3 shared)"),
                             ("one", "not judged: no collective is shared by two or more of the ranks loaded; "
                                     "the collectives also expect rank(s) 1-3 (3 ranks), whose traces are not loaded")):
        ts = traceattr.load(tmp_path / folder, cache=False, jobs=1)
        assert traceattr.imbalance(ts).summary() == expected
        out = run_cli("summarize", tmp_path / folder, "--by", "rank", "--no-cache", "--format", "csv")
        if folder == "all":
            assert out.returncode == 0 and f"traceattr: straggler: {expected}\n" in out.stderr, out.stderr
        else:       # issue 37: one rank gets no straggler line, and waiting is not measured (blank in csv)
            assert out.returncode == 0 and "traceattr: straggler:" not in out.stderr, out.stderr
            assert "expect rank(s) 1-3 (3 ranks), whose traces are not loaded" in out.stderr, out.stderr
            row = dict(zip(*(line.split(",") for line in out.stdout.splitlines()[:2])))
            assert row[S.COMMUNICATION_WAIT_NS] == row[S.COMMUNICATION_TRANSFER_NS] == "", row


def test_a_one_off_stall_is_named_and_explained_not_dismissed_as_chance(tmp_path):
    """Found on planted truth: one rank 2 ms late in one step of eight caused 99% of all waiting, yet read
    'not a consistent straggler: chance alone ... (p = 1.00)', with no cause; late in 3 of 10 steps, the
    same. Last too seldom to be consistent, it is now named a one-off stall (stalls at k collectives) when
    most of the waiting was for it, far beyond what the other collectives of that kind wait, with its cause.
    Noise is not: 2-rank sets with 20% compute jitter (the heaviest tail measured) never read as stalls."""
    for steps, late_in, extra in ((8, (3,), 2_000_000), (10, (3, 4, 5), 300_000)):
        ts, truth = _load(tmp_path / f"stall{steps}", ranks=8, steps=steps, compute_jitter=0.02, seed=3,
                          extra_compute_ns={2: extra}, extra_compute_steps=late_in)
        verdict = traceattr.imbalance(ts)
        caused = truth.wait_caused_ns()
        assert verdict.rank == 2 and verdict.wait_caused_ns == caused[2], (verdict.summary(), caused)
        assert verdict.share == pytest.approx(caused[2] / sum(caused.values())) and verdict.share > 0.9
        assert not verdict.consistent and verdict.one_off and verdict.cause == G.COMPUTE, verdict.summary()
        stall = "a one-off stall" if len(late_in) == 1 else f"stalls at {len(late_in)} collectives"
        assert f"; {stall}, not a consistent straggler" in verdict.summary(), verdict.summary()
        assert verdict.details[0].startswith("kernel extra_attention_kernel<float> +"), verdict.details
    # the command (per-file map-reduce) gives the same line
    run = run_cli("summarize", tmp_path / "stall8", "--by", "rank", "--no-cache", "--format", "json",
                  "-o", tmp_path / "t.json")
    assert run.returncode == 0, run.stderr
    assert f"straggler: {traceattr.imbalance(str(tmp_path / 'stall8'), cache=False).summary()}" in run.stderr
    for seed in range(6):
        noise = traceattr.imbalance(_load(tmp_path / f"noise{seed}", ranks=2, steps=12, compute_jitter=0.2,
                                          subgroup_size=2 * (seed % 2), seed=seed)[0])
        assert not noise.one_off and "stall" not in noise.summary(), noise.summary()
    # found by a trial: one 2 ms stall, and last twice more by µs of jitter, read 'stalls at 3 collectives'
    ts, truth = _load(tmp_path / "jittered", ranks=2, steps=8, extra_compute_ns={1: 2_000_000},
                      extra_compute_steps=(0,), compute_jitter=0.1, seed=41)
    verdict = traceattr.imbalance(ts)
    assert verdict.rank == 1 and verdict.late_arrivals > 1 and verdict.one_off, verdict.summary()
    assert verdict.stalls == 1 and "; a one-off stall, not a consistent straggler" in verdict.summary()


def test_exact_ties_are_no_trials_and_a_weaker_record_is_not_too_few(tmp_path):
    """Found on planted truth: a send/recv each step (whose two ends tie: nobody is last) or a 2-rank
    subgroup all-reduce beside the full one raised each step's chance, so a rank last at 5 of 5 full
    all-reduces read 'too few steps to tell (p >= 0.33)'; and a rank last at 4 of 12, where chance is 1.0,
    read 'too few to tell' with a cause, where it is no consistent straggler at all."""
    for name, kw in (("sub", dict(ranks=8, subgroup_size=2, extra_compute_ns={5: 300_000})),
                     ("pair", dict(ranks=2, p2p=True, extra_compute_ns={1: 300_000}))):
        verdict = traceattr.imbalance(_load(tmp_path / name, steps=5, compute_jitter=0.02, seed=1, **kw)[0])
        assert verdict.rank == max(kw["extra_compute_ns"]) and verdict.consistent, (name, verdict.summary())
        assert re.search(r"chance alone would make some rank last that often with p [<=] ", verdict.summary())
    weak = traceattr.imbalance(_load(tmp_path / "weak", ranks=4, steps=6, p2p=True, late_launch_ns={0: 200_000},
                                     compute_jitter=0.02, seed=1)[0])
    assert weak.late_arrivals < weak.shared and not weak.consistent and not weak.too_few, weak.summary()
    assert "not a consistent straggler" in weak.summary() and "median arrival" not in weak.summary()


def test_an_exact_tie_names_no_last_rank(tmp_path):
    """Found by a trial: with every rank arriving at the same ns, `--by collective` named rank 0 last (the
    tie-break) beside a skew of 0. Nobody was last: -1 in the machine formats, `-` in the table, by the API
    and by the command's map-reduce alike; a skewed instance keeps its rank."""
    ts, truth = _load(tmp_path / "tie", ranks=2, steps=2)
    instances = traceattr.collectives(ts)
    assert list(instances[S.ARRIVAL_SKEW_NS]) == [0, 0] and list(instances[S.LAST_RANK]) == [-1, -1]
    assert [c.last_rank for c in truth.collectives] == [-1, -1]
    out = run_cli("summarize", tmp_path / "tie", "--by", "collective", "--no-cache", "-q", "--format", "csv")
    assert out.returncode == 0 and list(pd.read_csv(io.StringIO(out.stdout))[S.LAST_RANK]) == [-1, -1], out.stderr
    late, _ = _load(tmp_path / "late", ranks=2, steps=2, extra_compute_ns={1: 50_000})
    assert list(traceattr.collectives(late)[S.LAST_RANK]) == [1, 1]


def test_a_straggler_whose_trace_is_missing_is_not_silently_replaced(tmp_path):
    """Found on planted truth: with the straggler's file gone, the next-latest rank was named a consistent
    straggler with a cause, and only a separate note said the collectives lacked a rank. The verdict itself
    now says the rank waited for may be the one not loaded."""
    _load(tmp_path, ranks=4, steps=6, extra_compute_ns={2: 300_000}, compute_jitter=0.02, seed=1)
    (tmp_path / "rank2.pt.trace.json").unlink()
    verdict = traceattr.imbalance(str(tmp_path), cache=False, jobs=1)
    assert verdict.rank != 2 and verdict.absent == "2", verdict.summary()
    assert "rank(s) 2 took part in these collectives but no trace of it is loaded" in verdict.summary()
    # found by a trial: without jitter the loaded ranks arrive together, nobody of them is last, and the
    # verdict read 'no straggler' with no word of the rank that every one of them waited for
    _load(tmp_path / "still", ranks=4, steps=8, extra_compute_ns={2: 300_000})
    (tmp_path / "still" / "rank2.pt.trace.json").unlink()
    verdict = traceattr.imbalance(str(tmp_path / "still"), cache=False, jobs=1)
    assert verdict.rank == -1 and verdict.absent == "2", verdict.summary()
    assert verdict.summary() == ("no straggler: no rank loaded made another wait at a collective (of 8 shared); "
                                 "rank(s) 2 took part in these collectives but no trace of it is loaded: the rank "
                                 "the others waited for may be there")


def test_alignment_applied_for_one_rank_says_why(tmp_path):
    """Found by a trial: 'clock alignment: applied: residual 8.64 µs (raw clocks 8.44 µs; ...)' read as a worse
    alignment applied for no reason; it was applied because one truncated rank's clock was 5 s off, which
    the median over all collectives leaves unseen. The line now says so."""
    ts, truth = _load(tmp_path, ranks=8, steps=8, extra_compute_ns={5: 300_000}, truncated={3: 7},
                      clock_offset_ns={3: 5_000_000_000}, end_jitter_ns=10_000, compute_jitter=0.02, seed=1)
    alignment = alignment_of(ts)
    assert alignment.applied and alignment.residual_after_ns > alignment.residual_before_ns
    text = traceattr.summarize(ts, by="rank").attrs["facts"]["clock alignment"]
    assert text.startswith("applied: a rank's clock is far off (largest spread 5.00 s raw, "), text
    assert "the median residual moves from " in text, text


def test_a_second_late_rank_is_named_beside_the_straggler(tmp_path):
    """Found by a trial: ranks 300 and 200 µs late each step; the second was never the last one, so it caused
    no wait, and the verdict named only the first: fixing it would then gain little. Ranks whose mean arrival
    after the first is a quarter of the straggler's and 5x the median rank's are now named beside it."""
    ts, truth = _load(tmp_path / "two", ranks=8, steps=6, extra_compute_ns={1: 300_000, 5: 200_000},
                      compute_jitter=0.02, seed=2)
    verdict = traceattr.imbalance(ts)
    assert verdict.rank == 1 and verdict.consistent and truth.wait_caused_ns().get(5, 0) == 0
    ((rank, lag),) = verdict.also_late
    assert rank == 5 and 190_000 <= lag <= 210_000 and verdict.median_lag_ns < 10_000, verdict.also_late
    assert f"; also behind the others: rank 5 +{G.human_ns(lag)} (mean arrival after the first rank" in verdict.summary()
    one = traceattr.imbalance(_load(tmp_path / "one", ranks=8, steps=6, extra_compute_ns={1: 300_000},
                                    compute_jitter=0.02, seed=2)[0])
    assert one.rank == 1 and one.also_late == () and "also behind" not in one.summary()


def test_compare_says_when_communication_time_is_waiting(tmp_path):
    """Found by a trial: comparing a job with the same job plus one slow rank put the all-reduce (+4.46 ms,
    +419%) above the kernel that was added (+1.50 ms): a collective's kernels run while they wait for the
    last rank. A note now says so, with `summarize --by rank` to split wait from transfer, when
    communication time makes a quarter or more of the busy-time change; not for jitter alone."""
    base = dict(ranks=4, steps=5, compute_jitter=0.02, seed=1)
    a, _ = _load(tmp_path / "a", **base)
    b, _ = _load(tmp_path / "b", extra_compute_ns={2: 300_000}, **base)
    same, _ = _load(tmp_path / "same", **{**base, "seed": 2})
    on_paths = traceattr.compare(str(tmp_path / "a"), str(tmp_path / "b"), cache=False, jobs=1)
    notes = [n for n in on_paths.attrs["notes"] if n.startswith("communication time +")]
    assert len(notes) == 1 and "summarize PATH --by rank" in notes[0], on_paths.attrs["notes"]
    assert traceattr.compare(a, b).attrs["notes"] == on_paths.attrs["notes"]     # loaded, the same
    assert not any("communication time" in n for n in traceattr.compare(a, same).attrs["notes"])


def test_an_outlier_step_explained_by_a_collective_says_that_is_waiting(tmp_path):
    """Found by a trial: one rank 2 ms late in one step of eight; every rank's step ran 2 ms long, and the
    outlier-step note (measured on rank 0) said 'ncclDevKernel_AllReduce... +2.00 ms', pointing at the
    network. It now says the largest key is communication, which includes waiting, and where the straggler
    is named; a step made long by compute says nothing of the kind."""
    from traceattr.analysis.imbalance import step_facts_of
    from traceattr.api import step_imbalance

    def step_facts(traceset):
        return step_facts_of(step_imbalance(traceset))

    ts, _ = _load(tmp_path / "stall", ranks=8, steps=8, compute_jitter=0.02, seed=3, extra_compute_ns={2: 2_000_000},
                  extra_compute_steps=(3,))
    facts, (note,) = step_facts(ts)
    assert facts["outlier step"].startswith("ProfilerStep#4 on rank "), facts
    assert "ncclDevKernel_AllReduce" in note and "(the largest is communication: on rank " in note, note
    assert note.endswith("`--by rank` names the straggler and its cause)"), note
    one, _ = _load(tmp_path / "one", ranks=1, steps=8, compute_jitter=0.02, seed=3, extra_compute_ns={0: 2_000_000},
                   extra_compute_steps=(3,))
    facts, (note,) = step_facts(one)
    assert "extra_attention_kernel" in note and "communication" not in note, note


def test_two_equally_slow_ranks_are_named_together(tmp_path):
    """Found by a trial: ranks 0 and 3 both 1 ms late every step took turns being last; neither was a
    consistent straggler alone (p = 0.11), so the verdict said only that, with no cause, and the second
    rank went unnamed, while half the ranks spent two thirds of their time waiting for the pair. The ranks
    also behind are now judged with the straggler as one group (chance g/n per collective, times the
    C(ranks, g) groups); a pair last together more often than chance is named with its cause. Noise is not."""
    ts, truth = _load(tmp_path / "pair", ranks=4, steps=8, extra_compute_ns={0: 1_000_000, 3: 1_000_000},
                      compute_jitter=0.02, seed=25)
    verdict = traceattr.imbalance(ts)
    planted = sum(c.last_rank in (0, 3) for c in truth.collectives)
    assert not verdict.consistent and verdict.consistent_group, verdict.summary()
    assert sorted(verdict.group) == [0, 3] and verdict.group_late == planted == verdict.group_shared == 8
    assert verdict.group_chance == pytest.approx(6 * 0.5 ** 8)          # C(4, 2) pairs, each last at half
    assert f"ranks {verdict.group[0]} and {verdict.group[1]} together were last at 8 of 8" in verdict.summary()
    assert verdict.cause == G.COMPUTE and "also behind the others: rank" in verdict.summary(), verdict.summary()
    run = run_cli("summarize", tmp_path / "pair", "--by", "rank", "--no-cache", "--format", "csv", "-q")
    assert run.returncode == 0 and f"straggler: {verdict.summary()}" in run.stderr, run.stderr
    for seed in range(8):                   # balanced ranks with jitter: no pair is accused
        noise = traceattr.imbalance(_load(tmp_path / f"noise{seed}", ranks=4, steps=8, compute_jitter=0.1,
                                          seed=seed)[0])
        assert not noise.consistent_group or noise.consistent, noise.summary()


def test_ranks_that_disagree_on_a_collectives_size_get_a_note(tmp_path):
    """Found by a trial: rank 0 said In msg nelems 2097152 and rank 1 1048576 for the same all-reduces;
    they matched, bytes took the larger and busbw doubled, with nothing said. A note now says so; the
    planted sets, whose ranks agree, get none."""
    build_multirank(MultiRankSpec(ranks=2, steps=3), tmp_path)
    agreeing = traceattr.collectives(str(tmp_path), cache=False, jobs=1)
    assert not any("disagree on the size" in note for note in agreeing.attrs["notes"])
    path = tmp_path / "rank1.pt.trace.json"
    text = path.read_text()
    assert text.count('"In msg nelems": 1048576') == 6       # the kernels' and their record_param_comms'
    path.write_text(text.replace('"In msg nelems": 1048576', '"In msg nelems": 2097152'))
    found = traceattr.collectives(str(tmp_path), cache=False, jobs=1)
    assert list(found[S.BYTES]) == [8_388_608] * 3
    assert ("3 collective instance(s) whose ranks disagree on the size (first: allreduce of 4,194,304 bytes on "
            "some ranks, 8,388,608 on others): bytes and bandwidth use the largest") in found.attrs["notes"]


def test_skews_within_the_clocks_residual_are_no_evidence(tmp_path):
    """Found by a trial: 16 balanced ranks in 2-rank subgroups, 2 µs of end jitter on identical clocks: the
    alignment fitted offsets of ±400 ns, as large as the subgroups' arrival skews, which flipped their last
    ranks, and rank 7 was named a straggler on noise (last at 12 of 24, p = 0.036). Which rank was last at a
    skew within the residual is the clock estimate's noise: such collectives are no trials."""
    ts, truth = _load(tmp_path, ranks=16, steps=12, compute_jitter=0.05, seed=176783, end_jitter_ns=2000,
                      subgroup_size=2)
    verdict = traceattr.imbalance(ts)
    assert not verdict.consistent and not verdict.shows_cause, verdict.summary()
    assert "not a consistent straggler" in verdict.summary()


@pytest.mark.parametrize("told_by", ["arg", "annotation", "name"])
def test_collective_kind_is_what_the_trace_says_the_call_was(tmp_path, told_by):
    """An all-to-all run as SendRecv kernels is an alltoall when its `Collective name` or the `nccl:all_to_all`
    annotation around its launch says so (another thread's `nccl:all_reduce` at the same time does not count);
    only with neither does the kernel name decide (sendrecv). Matching is the same either way."""
    ts, truth = _load(tmp_path, ranks=3, steps=3, extra_compute_ns={1: 30_000}, alltoall_told_by=told_by)
    _, instances = _check_conservation(ts)
    assert list(instances[S.COLLECTIVE]) == [c.kind for c in truth.collectives]
    assert {c.kind for c in truth.collectives} == {"sendrecv" if told_by == "name" else "alltoall"}
    assert list(instances[S.LAST_RANK]) == [c.last_rank for c in truth.collectives]
    assert list(instances[S.RANKS]) == ["0,1,2"] * 3


def test_real_trace_filter_kinds_come_from_the_nccl_annotations():
    """DLRM's sampled ranks: every collective ran as an `ncclKernel_SendRecv`; the `nccl:<kind>` annotation
    around each launch tells all-to-alls, all-reduces and all-gathers apart, the same on both ranks."""
    ts = traceattr.load(shared_trace("trace_filter"), cache=False, jobs=1)
    rows = comm_extract(ts)
    assert rows[S.NAME].str.startswith("ncclKernel_SendRecv").all()
    for rank in (0, 1):
        assert rows.loc[rows[S.RANK] == rank, S.KIND].value_counts().to_dict() == {
            "alltoall": 4, "allreduce": 4, "allgather": 2}
    instances = traceattr.collectives(ts)
    assert len(instances) == 10 and (instances[S.MISSING_RANKS] == "").all()
