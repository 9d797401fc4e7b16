"""`traceattr check --clip-outliers` by per-file map-reduce (analysis/clip_plan.py), on builder sets of 1
and 8 ranks without outliers and with planted ones (longer than the window, with and without a run-wide
median, a copy among them; far beyond typical; both) in several files, with a skipped file, jobs 1 and 2:
its "as loaded" side is the rank table's busy and idle; only the devices holding a planted outlier are
clipped, each by at most what its outliers last beyond their clipped length; clipping conserves each
device's window; the check rows are the plain check's; only the files with an outlier are mapped a third
time; the CLI gives the in-process report's text in every format, its driver holding no TraceSet of device
rows; a store gives the table of its traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

import traceattr
from conftest import TRACESET_COUNTER
from traceattr import schema as S
from traceattr.analysis import check_plan, clip_plan
from traceattr.analysis.check import BAD
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.io.store import write_store
from traceattr.model.traceset import TraceSet
from traceattr.pipelines.check import check_runs
from traceattr.report.check import render_check
from test_check import findings
from test_scale_summarize_mapreduce import windows
from tracesets import SMALL

SGEMM = "ampere_sgemm_128x64_tn"         # 4 a rank per window of the builder, ~90 µs: windows are ~1.6 ms
FUSED = "void graph_fused_kernel_0"      # 2 a rank per window, ~7 µs: 1.2 ms is far beyond, inside the window
COPY = "Memcpy HtoD"
WIDTH = 160


def plant(path, name: str, dur_us: float, rename: str | None = None) -> None:
    """The first device activity named `name...` of a trace file lasts `dur_us` (and is renamed)."""
    document = json.loads(path.read_text())
    event = next(e for e in document["traceEvents"] if e.get("ph") == "X" and e.get("name", "").startswith(name)
                 and e.get("cat") in ("kernel", "gpu_memcpy"))
    event["dur"] = dur_us
    if rename:
        event["name"] = rename
    path.write_text(json.dumps(document))


@pytest.fixture
def maps(monkeypatch):
    """The files of each second and third map (in-process with jobs 1)."""
    seen = {"second": [], "third": []}
    second, third = check_plan.beyond_work, clip_plan.clip_work

    def second_task(unit, *args, **kwargs):
        seen["second"].append(os.path.basename(unit.path))
        return second(unit, *args, **kwargs)

    def third_task(unit, *args, **kwargs):
        seen["third"].append(os.path.basename(unit.path))
        return third(unit, *args, **kwargs)
    monkeypatch.setattr(check_plan, "beyond_work", second_task)
    monkeypatch.setattr(clip_plan, "clip_work", third_task)
    return seen


def assert_same_clip(folder, jobs: int = 1, maps: dict | None = None) -> pd.DataFrame:
    """The clip table: as loaded, the rank table's busy and idle; clipped, busy only ever shrinks, and only on
    devices with a clipped activity, by at most the longest outliers' length each (loose; the tests bound
    it by what they planted); busy + idle conserved. The check rows are those of the plain check. `maps`
    (the fixture): the clipping's maps only."""
    (plain,), plain_verdict = check_runs(str(folder), cache=False, jobs=1)
    for seen in (maps or {}).values():
        seen.clear()
    (got,), verdict = check_runs(str(folder), clip=True, cache=False, jobs=jobs)
    pd.testing.assert_frame_equal(got.report.findings, plain.report.findings, check_exact=True)
    assert verdict == plain_verdict == got.report.verdict
    clip = got.clip
    ranks = traceattr.summarize(folder, by="rank", cache=False, jobs=1, skip_bad=True)
    keys, columns = [S.RANK, S.DEVICE], [S.BUSY_NS, S.IDLE_NS]
    pd.testing.assert_frame_equal(clip[keys + columns], ranks[keys + columns].reset_index(drop=True),
                                  check_exact=True)
    assert (clip[S.BUSY_NS] + clip[S.IDLE_NS] == clip[S.CLIPPED_PREFIX + S.BUSY_NS]
            + clip[S.CLIPPED_PREFIX + S.IDLE_NS]).all()
    unclipped = clip[S.CLIPPED_ACTIVITIES] == 0
    assert (clip[S.BUSY_NS][unclipped] == clip[S.CLIPPED_PREFIX + S.BUSY_NS][unclipped]).all()
    assert (clip[S.CLIPPED_PREFIX + S.BUSY_NS][~unclipped] < clip[S.BUSY_NS][~unclipped]).all()
    return clip


def assert_clipped_by_at_most(clip: pd.DataFrame, planted_ns: dict[int, int]) -> None:
    """Clipping an outlier frees at most its planted duration on its rank's device: {rank: Σ planted ns}."""
    freed = (clip[S.BUSY_NS] - clip[S.CLIPPED_PREFIX + S.BUSY_NS]).groupby(clip[S.RANK]).sum()
    assert {rank: 0 < freed[rank] <= ns for rank, ns in planted_ns.items()} == {rank: True for rank in planted_ns}
    assert freed.drop(list(planted_ns)).eq(0).all()


def test_no_outliers_one_and_eight_ranks(tmp_path, maps):
    windows(tmp_path / "one", (0,), 3)
    write_trace_set(tmp_path / "eight", TraceSpec(ranks=tuple(range(8)), **SMALL))
    for folder, rows in (("one", 1), ("eight", 8)):
        clip = assert_same_clip(tmp_path / folder, maps=maps)
        assert len(clip) == rows and not clip[S.CLIPPED_ACTIVITIES].any()
        assert clip[S.BUSY_NS].equals(clip[S.CLIPPED_PREFIX + S.BUSY_NS])
    assert maps == {"second": [], "third": []}         # no outlier: the first map tells it all


@pytest.mark.parametrize("kind", ["longer", "beyond"])
def test_one_planted_outlier(tmp_path, maps, kind):
    write_trace_set(tmp_path, TraceSpec(ranks=tuple(range(8)), **SMALL))
    if kind == "longer":      # 3 ms in a 1.6 ms window, 30x its median: clipped to the median
        plant(tmp_path / "rank3.pt.trace.json", SGEMM, 3_000)
    else:                     # 1.2 ms, ~170x its median, inside its window
        plant(tmp_path / "rank3.pt.trace.json", FUSED, 1_200)
    clip = assert_same_clip(tmp_path, maps=maps)
    assert_clipped_by_at_most(clip, {3: 3_000_000 if kind == "longer" else 1_200_000})
    clip = clip.set_index(S.RANK)
    assert clip[S.CLIPPED_ACTIVITIES].to_dict() == {r: int(r == 3) for r in range(8)}
    assert clip.loc[3, S.CLIPPED_PREFIX + S.BUSY_NS] < clip.loc[3, S.BUSY_NS]
    assert (clip.drop(3)[S.BUSY_NS] == clip.drop(3)[S.CLIPPED_PREFIX + S.BUSY_NS]).all()
    assert maps["third"] == ["rank3.pt.trace.json"]    # the third map reads only the file with the outlier
    assert len(maps["second"]) == 8                   # every file holding the name gives its median


@pytest.fixture
def planted(tmp_path):
    """8 ranks in 2 windows, a file that cannot be read, and outliers in five files."""
    folder = tmp_path / "run"
    windows(folder, tuple(range(8)), 2)
    plant(folder / "w0_rank3.pt.trace.json", SGEMM, 3_000)                  # longer: to its median
    plant(folder / "w0_rank2.pt.trace.json", COPY, 4_000)                   # a longer copy: to its median
    plant(folder / "w1_rank6.pt.trace.json", SGEMM, 2_500, rename="planted_once")   # no median: the window end
    plant(folder / "w1_rank5.pt.trace.json", FUSED, 1_200)                  # far beyond only
    plant(folder / "w0_rank7.pt.trace.json", SGEMM, 20_000)                 # both, and most of its device
    (folder / "w1_rank4.pt.trace.json").write_text('{"traceEvents": [')     # skipped, a finding
    return folder


def test_outliers_in_several_files_and_a_skipped_one(planted, maps):
    clip = assert_same_clip(planted, maps=maps)
    assert_clipped_by_at_most(clip, {3: 3_000_000, 2: 4_000_000, 6: 2_500_000, 5: 1_200_000, 7: 20_000_000})
    clip = clip.set_index(S.RANK)
    assert clip[S.CLIPPED_ACTIVITIES].to_dict() == {0: 0, 1: 0, 2: 1, 3: 1, 4: 0, 5: 1, 6: 1, 7: 1}
    assert sorted(maps["third"]) == sorted(f"w{w}_rank{r}.pt.trace.json"
                                           for w, r in ((0, 3), (0, 2), (1, 6), (1, 5), (0, 7)))
    (got,), verdict = check_runs(str(planted), cache=False, jobs=1)        # plain check: same report
    assert verdict == BAD
    found = findings(got.report)
    # the planted problems, each in its file and no other (a lengthened kernel also overlaps the next on its
    # stream, and a lost window's steps differ from the others')
    targets = ("unreadable", "far_beyond_typical", "longer_than_window")
    assert {key for key in found if key[1] in targets} == {
        ("w1_rank4.pt.trace.json", "unreadable"), ("w1_rank5.pt.trace.json", "far_beyond_typical"),
        ("w0_rank7.pt.trace.json", "far_beyond_typical"), *((f"{name}.pt.trace.json", "longer_than_window")
                                                             for name in ("w0_rank3", "w0_rank2", "w1_rank6", "w0_rank7"))}
    assert found[("w1_rank4.pt.trace.json", "unreadable")][::2] == (1, BAD)
    assert found[("w1_rank5.pt.trace.json", "far_beyond_typical")][0] == 1
    assert found[("w0_rank7.pt.trace.json", "far_beyond_typical")][::2] == (1, BAD)
    for name in ("w0_rank3", "w0_rank2", "w1_rank6", "w0_rank7"):
        assert found[(f"{name}.pt.trace.json", "longer_than_window")][::2] == (1, BAD)


@pytest.fixture
def small(tmp_path):
    """3 ranks, a file that cannot be read, an activity longer than its window and one far beyond typical."""
    folder = tmp_path / "small"
    write_trace_set(folder, TraceSpec(ranks=(0, 1, 2), **SMALL))
    plant(folder / "rank1.pt.trace.json", SGEMM, 3_000)
    plant(folder / "rank2.pt.trace.json", FUSED, 1_200)
    (folder / "rank3.pt.trace.json").write_text('{"traceEvents": [')
    return folder


def test_a_process_pool_gives_the_same_table(small):
    # the second and third maps run on the pool too
    assert assert_same_clip(small, jobs=2)[S.CLIPPED_ACTIVITIES].tolist() == [0, 1, 1]


def test_a_pool_maps_even_a_single_outlying_file(tmp_path, monkeypatch):
    write_trace_set(tmp_path, TraceSpec(ranks=(0, 1), **SMALL))
    plant(tmp_path / "rank1.pt.trace.json", SGEMM, 3_000, rename="planted_once")   # in one file only
    biggest = [0]
    init = TraceSet.__init__

    def counting(self, device, *args, **kwargs):
        biggest[0] = max(biggest[0], device.num_rows)
        init(self, device, *args, **kwargs)
    monkeypatch.setattr(TraceSet, "__init__", counting)
    (got,), _ = check_runs(str(tmp_path), clip=True, cache=False, jobs=2)
    assert got.clip[S.CLIPPED_ACTIVITIES].tolist() == [0, 1]
    assert biggest == [0]           # every map on the pool: the driver never decoded a file


# one process runs the command in each format (imports are most of a small run's time): its exit codes and
# texts, each followed by a NUL, then on stderr the most device rows of any TraceSet it built
EVERY_FORMAT = TRACESET_COUNTER + """
import json
from traceattr.cli import main
for args in json.loads(sys.argv[1]):
    try:
        main(args, standalone_mode=False)
    except SystemExit as exc:
        print(f"\\0{exc.code}\\0", end="", flush=True)
print("BIGGEST", biggest[0], file=sys.stderr)
"""


def test_the_cli_in_every_format_is_the_in_process_report(small, tmp_path):
    path = str(small)
    formats = {"table": [], "markdown": [], "csv": [], "json": [], "parquet": ["-o", str(tmp_path / "got.parquet")]}
    commands = [["check", path, "--clip-outliers", "--no-cache", "-q", "--jobs", "1", "--format", fmt, *extra]
                for fmt, extra in formats.items()]
    done = subprocess.run([sys.executable, "-c", EVERY_FORMAT, json.dumps(commands)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": str(WIDTH)})
    texts = done.stdout.split("\0")
    assert texts[1::2] == ["2"] * len(formats), done.stderr          # bad, in every format
    want, _ = check_runs(path, clip=True, cache=False, jobs=1)
    for fmt, text in zip(formats, texts[0::2]):
        if fmt == "parquet":
            render_check(want, BAD, path, fmt, str(tmp_path / "want.parquet"))
            pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "got.parquet"),
                                          pd.read_parquet(tmp_path / "want.parquet"), check_exact=True)
        else:
            assert text == render_check(want, BAD, path, fmt, None, width=WIDTH), fmt
    clipped_rows = json.loads(texts[2 * list(formats).index("json")])["runs"][0]["clipped"]
    assert [row[S.CLIPPED_ACTIVITIES] for row in clipped_rows] == [0, 1, 1]
    # every map in this process (jobs 1): one-file TraceSets only, never the run's
    one_file = max(traceattr.load(p, cache=False).device.num_rows for p in sorted(small.glob("rank[012].*")))
    assert int(done.stderr.split("BIGGEST")[-1]) == one_file


def test_a_store_gives_the_table_of_its_traces(small, tmp_path):
    store = write_store(traceattr.load(small, cache=False, jobs=1, skip_bad=True), tmp_path / "store")
    (got,), verdict = check_runs(str(store), clip=True, cache=False, jobs=1)
    (mapped,), _ = check_runs(str(small), clip=True, cache=False, jobs=1)
    assert verdict == BAD
    pd.testing.assert_frame_equal(got.clip, mapped.clip, check_exact=True)


def test_a_file_is_decoded_once_when_its_later_maps_run_in_this_process(tmp_path, monkeypatch):
    """One file, cache off: the summary's check line needs a second map (the exact median of a kernel that
    may be far beyond it, planted), which took the file the first map decoded instead of decoding it again;
    the public function lets the kept file go once it has answered."""
    from traceattr.engine import units
    from traceattr.io import parallel
    from traceattr.pipelines.summarize import summary_report

    write_trace_set(tmp_path, TraceSpec(ranks=1, **{**SMALL, "steps": 6}))     # 12 of its kind: a median
    (path,) = tmp_path.glob("*.json")
    plant(path, FUSED, 1_200)
    decoded, original = [], parallel.decode_file
    monkeypatch.setattr(parallel, "decode_file", lambda *args, **kwargs: decoded.append(args[0]) or original(*args, **kwargs))
    second, beyond = [], check_plan.beyond_work
    monkeypatch.setattr(check_plan, "beyond_work", lambda unit, **kwargs: second.append(unit.path) or beyond(unit, **kwargs))
    report = summary_report(str(tmp_path), by="kernel", cache=False, jobs=1)
    assert "far beyond" in report.header["check"] and second == [str(path)]     # the second map ran
    assert decoded == [str(path)]                                                       # on the file decoded once
    units.forget_last_file()
    traceattr.summarize(tmp_path, by="rank", cache=False, jobs=1)
    assert units._LAST.decoded is None
