"""traceattr.interop.hta: HTA's own analyses give the same answers on the traceattr-built TraceAnalysis as on
HTA's own load, traceattr's numbers equal HTA's where the definitions agree, and bad input fails clearly.

HTA's loader is slow, so the equivalence runs on the small shared traces; the 15-35 MB ones are marked
`large_trace` and run only with TRACEATTR_HTA_LARGE=1 (each takes 5-15 s of HTA loading on 2 cores)."""

from __future__ import annotations

import logging
import os
import warnings

import pandas as pd
import pytest

from conftest import shared_trace

hta = pytest.importorskip("hta", reason="Holistic Trace Analysis is not installed (pip install 'traceattr[hta]')")

import traceattr  # noqa: E402
from traceattr import schema as S  # noqa: E402
from traceattr.interop import hta as interop  # noqa: E402

SMALL = ["critical_path/alexnet", "critical_path/simple_add", "amd_trace", "trace_filter", "nccl_parser_config"]
LARGE = ["ns_resolution_trace", "trace_diff/control", "trace_diff/test"]
_large = pytest.mark.skipif(os.environ.get("TRACEATTR_HTA_LARGE") != "1",
                            reason="large trace: HTA's own loader takes 5-15 s here; set TRACEATTR_HTA_LARGE=1")


@pytest.fixture(autouse=True)
def quiet_hta():
    from hta.configs.config import logger
    level = logger.level
    logger.setLevel(logging.ERROR)           # HTA logs every parse step as a warning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    logger.setLevel(level)


def analyses(ta, with_memory_bandwidth: bool) -> dict:
    ranks = ta.t.get_ranks()
    memory = {"memory bandwidth summary": lambda: [ta.get_memory_bw_summary(ranks=ranks)]}
    return {**(memory if with_memory_bandwidth else {}),
        "temporal breakdown": lambda: [ta.get_temporal_breakdown(visualize=False)],
        "idle time breakdown": lambda: list(ta.get_idle_time_breakdown(ranks=ranks, visualize=False,
                                                                       show_idle_interval_stats=True)),
        "kernel breakdown": lambda: list(ta.get_gpu_kernel_breakdown(visualize=False)),
        "comm/comp overlap": lambda: [ta.get_comm_comp_overlap(visualize=False)],
        "queue length summary": lambda: [ta.get_queue_length_summary(ranks=ranks)],
        "kernel launch stats": lambda: [frame for _, frame in
                                        sorted(ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False).items())],
    }


def assert_same_results(folder) -> None:
    from hta.trace_analysis import TraceAnalysis
    traceset = traceattr.load(folder, cache=False, jobs=1)
    # copies' bandwidth is recomputed from ns durations: eras B and C only (era A wrote whole µs)
    ns_durations = set(traceset.files.column(S.ERA).to_pylist()) <= {S.ERA_B, S.ERA_C}
    theirs = analyses(TraceAnalysis(trace_dir=str(folder)), ns_durations)
    ours = analyses(interop.trace_analysis(traceset), ns_durations)
    for name in theirs:
        expected, got = theirs[name](), ours[name]()
        assert len(expected) == len(got), name
        for want, have in zip(expected, got):
            if want is None:
                assert have is None, name
                continue
            # values equal; dtypes may differ (HTA's `dur` is float64 when its JSON had metadata events)
            pd.testing.assert_frame_equal(want.reset_index(drop=True), have.reset_index(drop=True),
                                          check_dtype=False, obj=f"{folder.name}: {name}")
        assert any(frame is not None and len(frame) for frame in got) or name in ("kernel launch stats",
                                                                                 "memory bandwidth summary"), name


@pytest.mark.parametrize("relative", SMALL)
def test_hta_analyses_are_equal_on_traceattr_built_object(relative):
    assert_same_results(shared_trace(relative))


@_large
@pytest.mark.large_trace
@pytest.mark.parametrize("relative", LARGE)
def test_hta_analyses_are_equal_on_large_traces(relative):
    assert_same_results(shared_trace(relative))


def test_built_from_columns_alone(tmp_path):
    """From a parquet store whose JSON is gone: nothing is parsed again, and HTA's answers are the same."""
    import shutil

    from traceattr.io.store import write_store
    from hta.trace_analysis import TraceAnalysis
    original = shared_trace("amd_trace")
    copy = tmp_path / "traces"
    shutil.copytree(original, copy)
    write_store(traceattr.load(copy, cache=False, jobs=1), tmp_path / "store")
    shutil.rmtree(copy)
    ours = interop.trace_analysis(tmp_path / "store")
    theirs = TraceAnalysis(trace_dir=str(original))
    pd.testing.assert_frame_equal(theirs.get_temporal_breakdown(visualize=False),
                                  ours.get_temporal_breakdown(visualize=False), check_dtype=False)


def test_busy_and_span_agree_with_htas_temporal_breakdown():
    """Where definitions agree: HTA's compute + non-compute time is the union of the kernel intervals
    (traceattr's busy), its kernel_time is the device span, its idle is span - busy. On the rows HTA kept."""
    ta = interop.trace_analysis(shared_trace("trace_filter"), cache=False, jobs=1)
    breakdown = ta.get_temporal_breakdown(visualize=False).set_index("rank")
    ranks = traceattr.summarize(interop.from_trace_analysis(ta), by="rank").set_index(S.RANK)
    assert sorted(ranks.index) == [0, 1]
    for rank, row in ranks.iterrows():
        hta_row = breakdown.loc[rank]
        assert row[S.BUSY_NS] == 1000 * (hta_row["compute_time(us)"] + hta_row["non_compute_time(us)"])
        assert row[S.DEVICE_SPAN_NS] == 1000 * hta_row["kernel_time(us)"]
        assert row[S.DEVICE_SPAN_NS] - row[S.BUSY_NS] == 1000 * hta_row["idle_time(us)"]
        # the conservation law holds on the converted set too
        parts = row[["compute_ns", "communication_ns", "memcpy_ns", "memset_ns"]].sum()
        assert parts == row[S.BUSY_NS]


def test_from_trace_analysis_keeps_what_htas_frames_hold():
    """An era-A trace (whole µs) with one ProfilerStep: HTA drops nothing and rounds nothing, so the
    TraceSet from HTA's own load has exactly traceattr's device activities."""
    from hta.trace_analysis import TraceAnalysis
    folder = shared_trace("critical_path/alexnet")
    direct = traceattr.load(folder, cache=False, jobs=1)
    back = interop.from_trace_analysis(TraceAnalysis(trace_dir=str(folder)))
    columns = [S.DEVICE, S.STREAM, S.NAME, S.CATEGORY, S.START_NS, S.END_NS, S.CORRELATION]
    sort = [S.START_NS, S.STREAM, S.NAME]
    want = direct.device.select(columns).to_pandas().sort_values(sort).reset_index(drop=True)
    have = back.device.select(columns).to_pandas().sort_values(sort).reset_index(drop=True)
    pd.testing.assert_frame_equal(want, have)
    assert traceattr.summarize(back, by="rank")[S.BUSY_NS].tolist() == \
        traceattr.summarize(direct, by="rank")[S.BUSY_NS].tolist() == [66_141_000]


def _sync_rows(ta) -> pd.DataFrame:
    """The cuda_sync rows of an HTA object's first rank, with the columns HTA's critical path reads."""
    trace = ta.t
    frame, symbols = trace.get_trace(trace.get_ranks()[0]), trace.symbol_table.get_sym_table()
    rows = frame[frame["cat"].map(symbols.__getitem__) == "cuda_sync"]
    rows = rows.assign(name=rows["name"].map(symbols.__getitem__))
    columns = ["ts", "dur", "name", "stream", "correlation", "wait_on_stream", "wait_on_cuda_event_record_corr_id"]
    return rows[columns].sort_values(["ts", "name"]).reset_index(drop=True)


def test_sync_markers_carry_their_event_as_in_htas_frames():
    """alexnet's `Stream Wait Event` rows name the stream and cudaEventRecord they wait on, and every sync its
    correlation: the built frames held HTA's defaults (-1) there instead of the trace's values."""
    from hta.trace_analysis import TraceAnalysis
    folder = shared_trace("critical_path/alexnet")
    built = interop.trace_analysis(folder, cache=False, jobs=1)
    theirs, ours = _sync_rows(TraceAnalysis(trace_dir=str(folder))), _sync_rows(built)
    assert (theirs["wait_on_cuda_event_record_corr_id"] >= 0).sum() > 0 and (theirs["correlation"] >= 0).sum() > 0
    pd.testing.assert_frame_equal(theirs, ours, check_dtype=False)
    # and back: the TraceSet from HTA's frames holds them in its marker table, as a direct load does
    columns = [S.NAME, S.CORRELATION, S.WAIT_ON_STREAM, S.WAIT_ON_CORRELATION]
    direct, back = (ts.markers.to_pandas() for ts in (traceattr.load(folder, cache=False, jobs=1),
                                                      interop.from_trace_analysis(built)))
    syncs = [frame[frame[S.CATEGORY] == S.CUDA_SYNC][columns].sort_values(columns).reset_index(drop=True)
             for frame in (direct, back)]
    pd.testing.assert_frame_equal(*syncs)


def test_unsupported_version_is_refused_before_loading(monkeypatch, tmp_path):
    monkeypatch.setattr(interop, "SUPPORTED", {"holistictraceanalysis": ((9, 0, 0), (10, 0, 0)),
                                               "traceinsight": ((9, 0, 0), (10, 0, 0))})
    installed = interop.importlib.metadata.version("holistictraceanalysis") \
        if _installed("holistictraceanalysis") else interop.importlib.metadata.version("traceinsight")
    with pytest.raises(interop.HTAInteropError) as error:
        interop.trace_analysis(tmp_path / "never-read")       # the version check comes before any file
    message = str(error.value)
    assert installed in message and ">=9.0.0,<10.0.0" in message and "unsupported" in message


def test_missing_hta_says_how_to_install(monkeypatch):
    monkeypatch.setattr(interop, "SUPPORTED", {"no-such-hta-distribution": ((0, 5, 0), (0, 6, 0))})
    with pytest.raises(interop.HTAInteropError, match=r"not installed \(pip install 'traceattr\[hta\]'"):
        interop.hta_version()


def test_failing_analysis_names_itself_and_the_version():
    """A CPU-only trace: HTA's temporal breakdown fails on it (on HTA's own load too)."""
    ta = interop.trace_analysis(shared_trace("torch213_cpu/single_json"), cache=False, jobs=1)
    dist, version = interop.hta_version()
    with pytest.raises(interop.HTAInteropError) as error:
        ta.get_temporal_breakdown(visualize=False)
    assert "get_temporal_breakdown" in str(error.value) and f"{dist} {version}" in str(error.value)
    assert ta.get_comm_comp_overlap(visualize=False) is not None     # the object stays usable


def test_several_windows_of_one_rank_are_refused():
    with pytest.raises(interop.HTAInteropError, match="one trace file per rank"):
        interop.trace_analysis(shared_trace("torch213_cpu/single_gz"), cache=False, jobs=1)


def test_not_an_analysis_is_refused():
    with pytest.raises(interop.HTAInteropError, match="not an HTA TraceAnalysis"):
        interop.from_trace_analysis(object())


def _installed(dist: str) -> bool:
    try:
        interop.importlib.metadata.version(dist)
        return True
    except interop.importlib.metadata.PackageNotFoundError:
        return False


def test_arguments_are_checked_and_several_windows_name_their_files(tmp_path):
    """A TraceSet with load options (a misspelt include_last_profiler_step too) was built without a word;
    several windows of a rank were refused naming the rank only."""
    from test_runs import _window

    for n, offset in ((0, 0), (1, 600_000_000)):      # one process, two windows ten minutes apart
        _window(tmp_path / f"w{n}" / "rank0.json", 0, 100, 1_795_993_600_000_000 + offset)
    one = traceattr.load(tmp_path / "w0", cache=False, jobs=1)
    for options in ({"include_last_profiler_steps": True}, {"rank_map": {"x": 1}}):
        with pytest.raises(TypeError, match="with a TraceSet"):
            interop.trace_analysis(one, **options)
    with pytest.raises(TypeError, match=r"trace_analysis\(\): path must be a TraceSet or a trace path"):
        interop.trace_analysis(3)
    both = traceattr.load(tmp_path, cache=False, jobs=1)
    assert both.files.num_rows == 2
    with pytest.raises(interop.HTAInteropError, match=r"one trace file per rank.*w0/rank0\.json.*w1/rank0\.json"):
        interop.trace_analysis(both)


def test_a_sub_microsecond_kernel_rounded_inwards_by_hta_is_clamped_and_counted():
    """HTA rounds ts up and the end down: a 768 ns kernel crossing no µs boundary got dur -1 µs, and the
    TraceSet built back from HTA's frames failed every analysis ("end before they start")."""
    from conftest import SAMPLE_TRACES
    from tracesets import checked

    folder = str(SAMPLE_TRACES / "capture_cuda_2stream")
    ta = interop.trace_analysis(folder, cache=False, jobs=1)
    negative = int((ta.t.get_trace(0)["dur"] < 0).sum())
    assert negative > 0         # the case is there: the frames keep HTA's own values
    ts = interop.from_trace_analysis(ta)
    ranks = traceattr.summarize(ts, by="rank")
    kernels = traceattr.summarize(ts, by="kernel")
    assert int(kernels[S.SELF_NS].sum()) == int(ranks[S.BUSY_NS].sum()) > 0
    assert ts.files.column(S.NEGATIVE_DURATIONS).to_pylist() == [negative]
    assert "clamped durations" in checked(ts).line()
