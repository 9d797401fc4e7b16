"""The map step on a real Dask LocalCluster: `summarize(path, executor=client)`, `summarize --scheduler` and
`convert --scheduler` run on the cluster's workers (the scheduler saw their tasks: the maps folded into
states combined on the workers) and give exactly the local tables, output and store."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

import traceattr
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.cli import main
from traceattr.io.store import read_store
from tracesets import SMALL, assert_same

distributed = pytest.importorskip("distributed")


def cli(*args: str):
    """The CLI in this process (click's runner): the same code path as the command, without start-up time."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_map_and_convert_run_on_the_workers_and_equal_the_local_run(tmp_path):
    run = tmp_path / "run"
    write_trace_set(run, TraceSpec(ranks=(0, 1, 2), **{**SMALL, "steps": 3}, rank_scale={1: 1.3}))
    local = {by: traceattr.summarize(run, by=by, jobs=1, cache=False) for by in ("kernel", "rank")}
    local_op = traceattr.attribute(run, by="op", jobs=1, cache=False)
    local_text = cli("summarize", str(run), "--by", "rank", "--format", "csv", "--no-cache", "-q").stdout
    module_text = cli("summarize", str(run), "--by", "module", "--format", "markdown", "--no-cache", "-q").stdout
    cli("convert", str(run), "-o", str(tmp_path / "local_store"), "--no-cache", "-q")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0", processes=True,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        log = client.scheduler_comm.recent_message_log       # Dask's debug log of the messages it sent
        logged = len(log)
        remote = {by: traceattr.summarize(run, by=by, executor=client, cache=False) for by in ("kernel", "rank")}
        remote_op = traceattr.attribute(run, by="op", executor=client, cache=False)
        # the user's client logged none of the map's tasks (only releases of finished ones, after the map), and
        # has its own log back
        sent = [m.get("op") for batch in list(log)[logged:] if isinstance(batch, list) for m in batch]
        assert client.scheduler_comm.recent_message_log is log and "update-graph" not in sent, sent
        address = cluster.scheduler_address
        remote_text = cli("summarize", str(run), "--by", "rank", "--format", "csv", "--no-cache", "-q",
                          "--scheduler", address).stdout
        # summarize --by module: map-reduce on the workers, header and check line included
        assert cli("summarize", str(run), "--by", "module", "--format", "markdown", "--no-cache", "-q",
                   "--scheduler", address).stdout == module_text
        cli("convert", str(run), "-o", str(tmp_path / "dask_store"), "--no-cache", "-q", "--scheduler", address)
        prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    # the workers ran the map steps (the convert's too), folded the parts into states and combined them (a tree
    # reduce), and the second maps (the straggler's files)
    assert {"fold_task", "combined", "file_task"} <= set(prefixes), prefixes
    for by, table in local.items():
        pd.testing.assert_frame_equal(remote[by], table, check_exact=True)
    pd.testing.assert_frame_equal(remote_op, local_op, check_exact=True)
    assert remote_text == local_text and local_text.count("\n") >= 4
    assert_same(read_store(tmp_path / "dask_store"), read_store(tmp_path / "local_store"))
    assert not list(tmp_path.glob(".dask_store.tmp-*"))                 # committed once, nothing left over


def test_a_fold_on_the_workers_skips_and_refuses_files_as_the_local_map_does(tmp_path):
    """The states fold and combine on the workers (a tree reduce of several runs of files); a file that
    cannot be read is skipped with the same note under skip_bad, and refused with the same one line without
    it, as when this process maps the files; not-a-trace JSON is skipped either way."""
    from traceattr.analysis.summary_plan import reduce_path
    from traceattr.errors import TraceError
    from traceattr.io.parallel import as_executor

    run = tmp_path / "run"
    write_trace_set(run, TraceSpec(ranks=(0, 1, 2, 3, 4), **SMALL))
    (run / "rank5.pt.trace.json").write_text('{"traceEvents": [')        # broken
    (run / "config.json").write_text('{"lr": 0.1}')                       # not a trace
    local, _ = reduce_path(run, by="op", skip_bad=True, jobs=1, cache=False)
    with pytest.raises(TraceError) as raised:
        reduce_path(run, by="op", jobs=1, cache=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0", processes=True,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        remote, runner = reduce_path(run, by="op", skip_bad=True, executor=client, cache=False)
        assert runner.folds_on_cluster(7)
        with pytest.raises(TraceError) as raised_remote:
            reduce_path(run, by="op", executor=as_executor(client), cache=False)
        prefixes = client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert {"fold_task", "combined"} <= set(prefixes), prefixes
    assert str(raised_remote.value) == str(raised.value) and "rank5.pt.trace.json" in str(raised.value)
    assert remote.notes == local.notes and any("skipped" in note and "rank5" in note for note in remote.notes)
    assert remote.files.equals(local.files)
    from traceattr.analysis.summary_plan import table_of
    pd.testing.assert_frame_equal(table_of(remote, "op"), table_of(local, "op"), check_exact=True)
    pd.testing.assert_frame_equal(remote.groups, local.groups, check_exact=True)
