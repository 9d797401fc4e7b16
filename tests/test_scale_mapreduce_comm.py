"""The multi-rank answers by per-file map-reduce (analysis/multirank_plan.py) of trace files as they are
decoded equal those of the same files loaded whole as a TraceSet (one more source of the same plans), bit for
bit: `--by rank` with its wait/transfer, late-arrival, wait-caused and clock-offset columns, `--by collective`
(instances, --aggregate, --top), the header facts (clock alignment, straggler and its cause, notes), with
--comm-pattern and --no-align, on builder sets with planted truth and on the shared real multi-rank traces;
the straggler verdict and each rank's wait caused are the planted ones; wait + transfer == communication."""

from __future__ import annotations

import pandas as pd
import pytest

import traceattr
from traceattr import schema as S
from traceattr.engine import columns as engine_columns
from traceattr.analysis import summary_plan as M, multirank_plan as MC, straggler as G
from traceattr.analysis.multirank_plan import comm_report, comm_tables
from traceattr.api import collectives, summarize
from traceattr.attribution import columns as C
from traceattr.builder.multirank import EXTRA_KERNEL, MultiRankSpec, build_multirank
from traceattr.builder.spec import DEFAULT_BASE_NS
from traceattr.io.comm_rules import apply_patterns
from traceattr.names import display_name

from clirun import run_cli
from conftest import shared_trace

OFFSETS = {1: 37_000, 2: -2_500_000_000, 3: 480_000, 6: 1_200_000}


def assert_same(folder, comm_patterns=(), align=True, variants=False) -> pd.DataFrame:
    """Map-reduce of the files against the same plans over load(): tables and headers; returns the
    map-reduce rank table."""
    loaded = traceattr.load(folder, cache=False, jobs=1)
    traceset = apply_patterns(loaded, comm_patterns)
    options = dict(align=align, comm_patterns=comm_patterns, jobs=1, cache=False)
    for by in ("rank", "collective"):
        table, header = comm_report(folder, by, **options)
        want = summarize(traceset, by=by, align=align)
        pd.testing.assert_frame_equal(table, want, check_exact=True)
        assert repr(table.attrs) == repr(want.attrs), by
        held, expected = comm_report(loaded, by, align=align, comm_patterns=comm_patterns)
        pd.testing.assert_frame_equal(held, want, check_exact=True)
        assert header == {**expected, "source": "traces (cache off)"}, by
        if by == "rank":
            rank = table
        else:        # traceattr.summarize(path, ...) takes this path too
            api = summarize(folder, by=by, top=None, **options)
            pd.testing.assert_frame_equal(api, want, check_exact=True)
    for by in (("kernel", "category") if comm_patterns else ()):      # the patterns apply at every level
        pd.testing.assert_frame_equal(summarize(folder, by=by, comm_patterns=comm_patterns, jobs=1, cache=False),
                                      summarize(traceset, by=by), check_exact=True)
    for aggregate, top in ([(True, None), (False, 2)] if variants else []):
        got = comm_tables(folder, by="collective", aggregate=aggregate, top=top, **options).table
        want = collectives(traceset, aggregate=aggregate, top=top, align=align)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert repr(got.attrs) == repr(want.attrs)
    # conservation: wait + transfer == communication self time per (rank, device), never negative
    assert (rank[S.COMMUNICATION_WAIT_NS] + rank[S.COMMUNICATION_TRANSFER_NS] == rank[C.COMMUNICATION_NS]).all()
    assert (rank[[S.COMMUNICATION_WAIT_NS, S.COMMUNICATION_TRANSFER_NS]] >= 0).all().all()
    return rank


def test_two_ranks_two_windows_late_launch(tmp_path):
    for window in range(2):          # two profiler windows per rank (10 s apart) of 3 ranks
        build_multirank(MultiRankSpec(ranks=3, steps=2, seed=window, late_launch_ns={1: 800_000},
                                      clock_offset_ns={1: 90_000},
                                      base_time_ns=DEFAULT_BASE_NS + window * 10_000_000_000), tmp_path / f"w{window}")
    table = assert_same(tmp_path, variants=True)
    assert table.attrs["facts"]["straggler"].startswith("rank 1: ") and G.LATE_LAUNCH in table.attrs["facts"]["straggler"]


def test_eight_ranks_offsets_p2p_truncated_and_comm_pattern(tmp_path, monkeypatch):
    # rows and cut profiles in several chunks and a tail, as at 1024 files (every other test: one chunk)
    monkeypatch.setattr(M, "COMPACT_EVERY", 3)         # the attribution parts, and engine.columns.Chunks:
    monkeypatch.setattr(engine_columns, "COMPACT_EVERY", 3)    # the rows' and the points' piles
    # three steps: last at 2 of 2 among 8 ranks is what chance alone does 1 time in 8 (not a consistent straggler)
    spec = MultiRankSpec(ranks=8, steps=3, clock_offset_ns=OFFSETS, extra_compute_ns={5: 90_000}, p2p=True,
                         truncated={7: 1}, seed=3)
    truth = build_multirank(spec, tmp_path)
    table = assert_same(tmp_path)
    # the straggler verdict through the map-reduce path, on planted truth
    caused = truth.wait_caused_ns()
    straggler = max(caused, key=lambda r: (caused[r], -r))
    assert straggler == 5
    assert table.attrs["facts"]["straggler"].startswith(f"rank {straggler}: ")
    assert G.COMPUTE in table.attrs["facts"]["straggler"]
    assert any(f"kernel {display_name(EXTRA_KERNEL)} +" in note for note in table.attrs["notes"])   # prose: short name
    assert dict(table.groupby(S.RANK)[S.WAIT_CAUSED_NS].sum()) == {r: caused.get(r, 0) for r in range(8)}
    # a user pattern that makes the extra kernel communication (it moves from compute to communication), on
    # raw clocks (--no-align)
    patterned = assert_same(tmp_path, comm_patterns=("extra_attention",), align=False)
    assert int(patterned[C.COMMUNICATION_NS].sum()) > int(table[C.COMMUNICATION_NS].sum())
    assert "off (--no-align)" in patterned.attrs["facts"]["clock alignment"]


def test_host_bound_straggler_and_a_missing_rank(tmp_path):
    build_multirank(MultiRankSpec(ranks=4, steps=4, host_stall_ns={2: 200_000}, clock_offset_ns={3: 5_000}),
                    tmp_path)
    (tmp_path / "rank3.pt.trace.json").unlink()          # its group still names rank 3: no trace loaded
    table = assert_same(tmp_path)
    assert table.attrs["facts"]["straggler"].startswith("rank 2: ") and G.HOST_BOUND in table.attrs["facts"]["straggler"]
    assert any("lack rank(s) 3 (no trace loaded)" in note for note in table.attrs["notes"])


def test_order_matching_without_group_info(tmp_path):
    build_multirank(MultiRankSpec(ranks=3, steps=2, with_seq=False, extra_compute_ns={0: 50_000}), tmp_path)
    table = assert_same(tmp_path)
    assert any("order of occurrence" in note for note in table.attrs["notes"])


def test_rank_off_in_few_collectives(tmp_path):
    """Its offset is applied by the per-rank rule of the alignment (test_collectives.py) on both paths."""
    build_multirank(MultiRankSpec(ranks=4, steps=3, clock_offset_ns={1: 1_781_924_818}, compute_kernels=2,
                                  transfer_ns=20_000, late_launch_ns={2: 900_000}, truncated={1: 2}), tmp_path)
    table = assert_same(tmp_path, variants=True)
    assert table.attrs["facts"]["clock alignment"].startswith("applied: residual 0 ns (raw clocks 0 ns; ")
    assert table.attrs["facts"]["straggler"].startswith("rank 2: ")


def test_subgroups_with_offsets(tmp_path):
    """Pairs all-reducing among themselves under an all-reduce of all ranks, clocks off by up to 1.5 s."""
    build_multirank(MultiRankSpec(ranks=6, steps=3, subgroup_size=2, p2p=True, extra_compute_ns={3: 300_000},
                                  clock_offset_ns={2: 302_038, 3: 140_266, 5: 1_500_000_000}), tmp_path)
    table = assert_same(tmp_path, variants=True)
    assert dict(zip(table[S.RANK], table[S.CLOCK_OFFSET_NS])) == {0: 0, 1: 0, 2: 302_038, 3: 140_266, 4: 0,
                                                                  5: 1_500_000_000}
    assert table.attrs["facts"]["straggler"].startswith("rank 3: ")


@pytest.mark.parametrize("name", ["trace_filter", "nccl_parser_config"])
def test_real_multirank_traces(name):
    table = assert_same(shared_trace(name))
    if name == "trace_filter":       # docs/collectives.md: rank 1, host-bound
        assert table.attrs["facts"]["straggler"].startswith("rank 1: ")


def test_split_in_map_two_from_the_file_cache(tmp_path, monkeypatch):
    """Files whose cut profile is too large to send are split in map 2 (a process pool, one task per file
    with its own cut times), from the file cache on the second run: the same table."""
    build_multirank(MultiRankSpec(ranks=3, steps=2, host_stall_ns={1: 100_000}, clock_offset_ns={2: 8_000}),
                    tmp_path / "run")
    want = summarize(traceattr.load(tmp_path / "run", cache=False, jobs=1), by="rank")
    monkeypatch.setattr(MC, "PROFILE_POINTS_PER_ROW", 0)        # no file sends its profile
    cache = tmp_path / "cache"
    first, _ = comm_report(tmp_path / "run", "rank", jobs=2, cache_dir=str(cache))
    again, header = comm_report(tmp_path / "run", "rank", jobs=2, cache_dir=str(cache))
    assert header["source"] == "traces (0 decoded, 3 from cache)"
    for got in (first, again):
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert repr(got.attrs) == repr(want.attrs)
    assert int(want[S.COMMUNICATION_WAIT_NS].sum()) > 0


def test_cli_by_rank_and_collective_unchanged(tmp_path):
    """The command's output equals what the same plans render for a TraceSet of its files (a store's path)."""
    from traceattr.cli import Display
    from traceattr.pipelines.summarize import _title
    from traceattr.report.summarize import Report, render_report
    from traceattr.io.results import multirank_options

    build_multirank(MultiRankSpec(ranks=3, steps=2, clock_offset_ns={2: 70_000}, host_stall_ns={2: 200_000},
                                  p2p=True), tmp_path)
    traceset = traceattr.load(tmp_path, cache=False, jobs=1, drop_host=(S.PYTHON_FUNCTION,))
    for by, extra in (("collective", ["--aggregate"]), ("rank", ["--no-align", "--comm-pattern", "extra_attention"])):
        out = run_cli("summarize", tmp_path, "--by", by, "--format", "markdown", "--no-cache", "-q", *extra,
                      env={"COLUMNS": "200"})        # in this process (tests/clirun.py)
        assert out.returncode == 0, out.stderr
        options = multirank_options(tuple(extra[2:]), "--no-align" not in extra, "--aggregate" in extra)
        table, header = comm_report(traceset, by, aggregate=options["aggregate"], align=options["align"],
                                    comm_patterns=options["comm_patterns"], host_dropped=(S.PYTHON_FUNCTION,))
        # as the command shows a header (cli.Display): -q leaves findings out, notes collapsed, jargon behind -v
        shown = Display(tmp_path, quiet=True).header({**header, "source": "traces (cache off)"})
        report = Report(table, shown, _title(table, by, options))
        want = render_report(report, "markdown", None, width=200).splitlines()
        assert out.stdout.splitlines() == want, by
