"""People tables: every digit printed at 80/120/200 columns, hostile names harmless, one row per key over
ranks by default (planted straggler), notes on stderr when the table goes to a file or machine format."""

from __future__ import annotations

import csv
import io
import json
import re

import pandas as pd
import pytest

from tests.tracesets import SMALL
from traceattr import schema as S
from traceattr.builder import TraceSpec, write_trace_set
from traceattr.report.notes import MAX_NOTES
from clirun import run_cli

HOSTILE = {
    "<img src=x onerror=alert(1)>": 40_000,
    "evil\nnewline, \"quoted\", kernel": 41_000,
    "\x1b[31mred\x1b[0m ansi": 42_000,
    "[bold]markup[/bold] | pipe": 43_000,
    "long_" + "x" * 10_000: 44_000,
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readable")
    # rank 2 is the planted straggler: all its kernels 1.5x slower
    write_trace_set(folder, TraceSpec(ranks=3, add_kernels=HOSTILE, rank_scale={2: 1.5}, **SMALL))
    return folder


def cli(*args, columns=200, check=True):
    result = run_cli(*args, env={"COLUMNS": str(columns)})     # in this process (tests/clirun.py)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def machine(traces, *args):
    return pd.DataFrame(json.loads(cli("summarize", traces, "-q", "--format", "json", *args).stdout))


@pytest.mark.parametrize("columns", [80, 120, 200])
@pytest.mark.parametrize("by", ["kernel", "rank", "op", "module", "annotation"])
def test_every_digit_prints_at_any_width(traces, columns, by):
    from traceattr.report.shape import human_ns

    from traceattr.report.render import render
    from traceattr.pipelines.summarize import summary_report

    report = summary_report(str(traces), by=by)
    table = report.table
    text = render(table, "table", header=report.header, title=report.title, width=columns)
    all_lines = text.splitlines()
    rules = [i for i, line in enumerate(all_lines) if line and set(line) == {"─"}]
    body = "\n".join(all_lines[rules[0]:])      # below the column titles
    # a narrow terminal leaves out secondary columns and says which under the table
    footer = re.search(r"\(not shown at \d+ columns: ([^;]+);", " ".join(text.split()))
    hidden = set(footer.group(1).split(", ")) if footer else set()
    assert columns >= 120 or by == "rank" or hidden
    for column in [c for c in table.columns if c.endswith("_ns")
                   and c.removesuffix("_ns").replace("_", " ") not in hidden]:
        for value in table[column]:
            shown = "-" if value == S.NO_INT else human_ns(value)
            assert re.search(rf"(?<![\w.]){re.escape(shown)}(?![\w.])", body), (column, shown)
    # a table too wide for the terminal (ranks: no name column) comes in blocks of columns, each repeating
    # the rank: every block holds every row on one line, in the same order
    blocks = []
    for rule in rules:
        rows = []
        for line in all_lines[rule + 1:]:
            if not line.strip() or line.startswith(("(not shown", "(~")):
                break
            rows.append(line)
        blocks.append(rows)
    assert all(len(rows) == len(table) for rows in blocks), "a row wrapped onto several lines (or is missing)"
    assert len(blocks) == 1 or (by == "rank" and columns < 200)
    assert all([row.split()[0] for row in rows] == [row.split()[0] for row in blocks[0]] for rows in blocks)
    assert max(len(line) for line in text.splitlines()) <= columns      # no line wider than the terminal
    numbers = [re.findall(r"\d+(?:\.\d+)? (?:ns|µs|ms|s)\b", line) for line in blocks[0]]
    assert all(numbers)


def report_table(traces, **options) -> pd.DataFrame:
    from traceattr.pipelines.summarize import summary_report

    return summary_report(str(traces), **options).table


def test_rows_over_ranks_by_default_with_the_planted_straggler(traces):
    per_rank = report_table(traces, per_rank=True)
    across = machine(traces)          # the CLI's default
    assert set(per_rank[S.RANK]) == {0, 1, 2} and S.RANK not in across.columns
    assert across[S.NAME].is_unique
    # conservation: the same total, and per key the per-rank rows add up
    assert across[S.SELF_NS].sum() == per_rank[S.SELF_NS].sum()
    summed = per_rank.groupby([S.NAME, S.CATEGORY])[S.SELF_NS].sum()
    assert dict(zip(zip(across[S.NAME], across[S.CATEGORY]), across[S.SELF_NS])) == summed.to_dict()
    compute = across[(across[S.CATEGORY] == "compute") & ~across[S.NAME].isin(list(HOSTILE))]
    assert (compute["max_rank"] == 2).all(), "the 1.5x slower rank is the most busy on every kernel"
    assert (compute["mean_self_ns"] == compute[S.SELF_NS] // 3).all()
    for row in compute.itertuples():
        mine = per_rank[(per_rank[S.NAME] == row.name) & (per_rank[S.CATEGORY] == row.category)]
        assert row.max_self_ns == mine[S.SELF_NS].max() and row.min_self_ns == mine[S.SELF_NS].min()
    top = report_table(traces, top=3)
    assert len(top) == 4 and top[S.NAME].iloc[-1] == "<other>"
    assert top[S.SELF_NS].sum() == per_rank[S.SELF_NS].sum()
    ranks = report_table(traces, by="rank")
    assert sorted(ranks[S.RANK]) == [0, 1, 2]      # rank tables stay per rank


def test_hostile_names_are_shown_not_executed(traces):
    from traceattr.report.render import render

    table = report_table(traces)
    text = render(table, "table", width=300)
    assert "\x1b" not in text and "\\x1b[31mred" in text
    assert "evil newline" in text and "<img src=x onerror=alert(1)>" in text
    assert "[bold]markup[/bold]" in text
    assert max(len(line) for line in text.splitlines()) < 400     # the 10 kB name is shortened
    full = render(table, "table", width=120, full_names=True)
    assert full.count("x") >= 10_000                              # ... and folded whole with --full-names
    markdown = render(table, "markdown")
    assert "&lt;img src=x" in markdown and "\\|" in markdown and "\x1b" not in markdown
    rows = list(csv.DictReader(io.StringIO(cli("summarize", traces, "-q", "--format", "csv").stdout)))
    names = {row[S.NAME] for row in rows}
    assert set(HOSTILE) <= names                                  # csv parses back to the very names


def test_display_names_are_unique_in_a_rendered_table():
    from traceattr.report.render import render

    names = [f"void k<{i}, at::native::FillFunctor<float> >(int)" for i in range(5)] + ["x" * 300, "x" * 299]
    table = pd.DataFrame({S.NAME: names, S.SELF_NS: range(1000, 1007)})
    text = render(table, "table", width=80)
    rows = text.split("\n(~xxxxxx after a name")[0]          # the rows, without the line under them
    shown = [line.rsplit("  ", 1)[0].strip() for line in rows.splitlines()[2:]]
    assert len(set(shown)) == len(names) == len(shown)


def test_notes_go_to_stderr_when_the_table_does_not_reach_the_terminal(traces, tmp_path):
    from traceattr.pipelines.summarize import summary_report

    header = summary_report(str(traces), by="rank").header
    notes = header["notes"]
    assert notes, "the planted straggler gets a note on the rank table"
    on_terminal = cli("summarize", traces, "-q", "--by", "rank", "--notes")
    assert on_terminal.stdout.count("note: ") == len(notes) and on_terminal.stderr == ""
    # issue 37: by default the box shows MAX_NOTES of them and how many more (stderr below gets them all)
    assert len(notes) > MAX_NOTES + 1
    shown = cli("summarize", traces, "-q", "--by", "rank").stdout
    assert shown.count("note: ") == MAX_NOTES + 1 and f"note: {len(notes) - MAX_NOTES} more notes: --notes" in shown
    output = tmp_path / "out.csv"
    to_file = cli("summarize", traces, "-q", "--by", "rank", "--format", "csv", "-o", output)
    assert to_file.stdout == "" and output.stat().st_size > 0
    # the verdicts too: only the notes reached stderr, and the straggler and the check were lost
    verdicts = [f"traceattr: {key}: " + " ".join(header[key].split())
                for key in ("check", "clock alignment", "straggler", "busiest rank") if key in header]
    assert verdicts[0].startswith("traceattr: check: ") and any(": straggler: rank " in v for v in verdicts)
    expected = verdicts + ["traceattr: note: " + " ".join(note.split()) for note in notes]
    assert to_file.stderr.splitlines() == expected
    json_out = cli("summarize", traces, "-q", "--by", "rank", "--format", "json")
    assert json.loads(json_out.stdout) and json_out.stderr.splitlines() == expected


def test_trees_use_the_table_units_and_header_box(traces):
    from traceattr.report.render import render
    from traceattr.pipelines.summarize import summary_report

    report = summary_report(str(traces), by="module", tree=True)
    text = render(report.table, "table", header=report.header, title=report.title, tree_top=report.tree_top)
    assert text.startswith("╭") and " us" not in text and "µs" in text


def test_repr_dir_and_help():
    import traceattr

    traceset = traceattr.load("sample_traces/synthetic_2rank", progress=False)
    text = repr(traceset)
    assert len(text) < 400 and "\n" not in text and "2 files," in text and "ranks [0, 1]" in text and "390 device activities" in text
    assert {"load", "summarize", "attribute", "compare", "TraceSet"} <= set(dir(traceattr))
    assert set(traceattr.__all__) <= set(dir(traceattr))
    help_text = cli("summarize", "--help").stdout
    for word in ("duration", "self", "solo", "with_stack"):
        assert word in help_text


def test_arrow_tables_render_like_pandas_ones():
    """Cached answers are arrow tables: every text format renders them the same as their pandas twin."""
    import pyarrow as pa

    from traceattr.report.render import render

    frame = pd.DataFrame({S.NAME: ['a,"b"\nc', "<other>", "\x1b[2J"], S.COUNT: [1, 2, -1],
                          S.SELF_NS: [1500, 2, 3_000_000], S.SELF_PCT: [1.0, 2.5, 96.5]})
    arrow = pa.Table.from_pandas(frame, preserve_index=False)
    for fmt in ("table", "markdown", "json"):
        assert render(arrow, fmt, width=80) == render(frame, fmt, width=80), fmt
    back = list(csv.DictReader(io.StringIO(render(arrow, "csv"))))
    assert [row[S.NAME] for row in back] == frame[S.NAME].tolist()
    assert [int(row[S.SELF_NS]) for row in back] == frame[S.SELF_NS].tolist()


def test_points_in_time_show_as_utc_with_every_ns_digit_not_as_durations():
    import pandas as pd

    from traceattr.report.render import render
    from traceattr.report.shape import human_instant

    assert human_instant(1_795_988_168_964_372_579) == "2026-11-29 21:36:08.964372579"
    assert human_instant(S.NO_INT) == "-" and human_instant(10**30) == f"{10**30:,} ns"
    table = pd.DataFrame({S.FIRST_START_NS: [1_795_988_168_964_372_579], S.ARRIVAL_SKEW_NS: [270_096]})
    text = render(table, "table", width=120)
    assert "2026-11-29 21:36:08.964372579" in text and "270 µs" in text and "1795988168 s" not in text


def test_ranks_counts_every_rank_that_has_the_key_even_at_zero_ns():
    """`ranks` is how many ranks ran the key: a zero-length op on every rank (integer-µs traces round short
    ops to 0) was counted on none."""
    from traceattr.analysis.across import across_ranks

    table = pd.DataFrame({S.RANK: [0, 0, 1, 1, 2], S.DEVICE: [0, 0, 0, 0, 0],
                          S.NAME: ["aten::empty", "aten::mm", "aten::empty", "aten::mm", "aten::mm"],
                          S.COUNT: [1, 1, 1, 1, 1], S.SELF_NS: [0, 10, 0, 30, 20]})
    rows = across_ranks(table).set_index(S.NAME)
    assert rows.loc["aten::empty", "ranks"] == 2 and rows.loc["aten::mm", "ranks"] == 3
    assert rows.loc["aten::empty", "min_rank"] == 0 and rows.loc["aten::empty", "min_self_ns"] == 0
    assert rows.loc["aten::mm", "max_rank"] == 1 and rows[S.SELF_NS].sum() == 60


def test_the_api_gives_the_clis_table_over_ranks(tmp_path):
    """The CLI's default table (one row per kernel over all ranks) had no public API to make it."""
    import traceattr

    path = "sample_traces/synthetic_2rank"
    ts = traceattr.load(path, progress=False)
    api = traceattr.across_ranks(traceattr.summarize(ts, by="kernel"), ranks=ts.ranks)
    output = tmp_path / "k.csv"
    cli("summarize", path, "-q", "--no-cache", "--format", "csv", "-o", output)
    printed = pd.read_csv(output)
    assert list(printed.columns) == list(api.columns) and len(printed) == len(api)
    assert printed[S.SELF_NS].tolist() == api[S.SELF_NS].tolist() and "across_ranks" in dir(traceattr)


@pytest.mark.parametrize("by", ["collective", "category", "rank"])
def test_tables_without_a_name_column_fit_the_terminal_in_blocks(traces, by):
    """Found by a review: the rank (198 columns), collective (208) and category (112) tables ignored a
    100-column terminal, which then wrapped every row onto two or three lines."""
    rows = list(csv.DictReader(io.StringIO(cli("summarize", traces, "--by", by, "-q", "--format", "csv").stdout)))
    text = cli("summarize", traces, "--by", by, "-q", columns=100).stdout
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    rules = [i for i, line in enumerate(lines) if line and set(line) == {"─"}]
    assert len(rules) >= 2                          # wider than 100 columns: in blocks
    first = next(iter(rows[0]))                     # each block repeats the row's key (rank, instance, category)
    for rule in rules:
        block = lines[rule + 1:rule + 1 + len(rows)]
        assert [line.split()[0] for line in block] == [row[first] for row in rows]


def test_check_fits_an_80_column_terminal(traces):
    """check kept 100 columns on an 80-column terminal, which wrapped every row of its table in two."""
    text = cli("check", traces, "-q", columns=80, check=False).stdout
    assert max(len(line) for line in text.splitlines()) <= 80 and "verdict" in text
    assert "unlinked" in text and "linked " in text          # the check and its detail, in blocks if need be


def test_full_names_fill_each_line(traces):
    """Found by a review: with --full-names a kernel's first line read 'void' alone (the folding moved the
    long name after the return type whole to the next line); lines are now filled, and the name is whole."""
    from traceattr.report.render import render

    table = report_table(traces)
    long_names = [name for name in table[S.NAME] if name.startswith("void ") and len(name) > 60]
    assert long_names
    text = render(table, "table", width=100, full_names=True)
    lines = text.splitlines()
    first_lines = [line for line in lines if re.search(r"\s(compute|communication|memcpy|memset)\s", line)]
    assert len(first_lines) == len(table)
    assert not [line for line in first_lines if re.match(r"\s*void\s{2,}", line)]      # never 'void' alone
    # each name whole: in a table of names and one number, the name's lines joined give it back
    lines = render(table[[S.NAME, S.SELF_NS]], "table", width=60, full_names=True).splitlines()
    joined = "".join(re.sub(r"\s+[\d.]+ (ns|µs|ms|s)$", "", line).strip() for line in lines)
    assert all(name.replace(" ", "") in joined.replace(" ", "") for name in long_names)


def test_a_hash_after_a_name_is_explained_under_the_table():
    """Found by a review: rows like 'k<FillFunctor, float> ~1a2b3c' came without a word on what the suffix
    was. A line under the table (terminal and markdown) now says it, only when a shown name has one."""
    from traceattr.report.render import render

    alike = pd.DataFrame({S.NAME: ["void k<4, at::native::FillFunctor<float> >(int)",
                                   "void k<4, at::native::FillFunctor<float> >(long)"],
                          S.SELF_NS: [2_000, 1_000]})
    apart = alike.assign(**{S.NAME: ["void k<4, at::native::FillFunctor<float> >(int)", "gemm"]})
    for fmt in ("table", "markdown"):
        text = render(alike, fmt, width=100).replace("\\~", "~").replace("&lt;", "<").replace("&gt;", ">")
        assert re.search(r"k<FillFunctor, float> ~[0-9a-f]{6}", text)
        assert "(~xxxxxx after a name: names that look alike here, told apart by a hash of the whole name;" \
            in " ".join(text.split())
        assert "~xxxxxx" not in render(apart, fmt, width=100)
        assert "~xxxxxx" not in render(alike, fmt, width=100, full_names=True)


def test_the_name_column_comes_before_optional_columns_at_narrow_widths():
    """At 100 columns an 8-rank-style kernel table showed `vect…‹CUDAFuncto…lf_add>` while its min/max rank
    columns stayed: the rank columns make way until the names have 40 characters (or fit whole)."""
    from traceattr.report.render import render

    names = ["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
             "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
             "void m_grouped_fp8_ptp128c::GemmKernel<128u, 4096u, 7168u>(float*, int)",
             "void m_grouped_fp8_ptp128d::GemmKernel<128u, 4096u, 7168u>(float*, int)"]
    table = pd.DataFrame({S.NAME: names, S.CATEGORY: ["compute"] * 3, S.COUNT: [10, 20, 30],
                          S.SELF_NS: [3_000_000, 2_000_000, 1_000_000], S.SELF_PCT: [50.0, 33.3, 16.7],
                          "min_self_ns": [1_000_000] * 3, "min_rank": [3] * 3, "max_self_ns": [2_000_000] * 3,
                          "max_rank": [7] * 3})
    text = render(table, "table", width=100)
    assert "not shown at 100 columns: min rank, max rank" in text
    assert re.search(r"vectorized_elementwise_\w*…?<CUDAFunctor_add>", text) and "~" not in text
    assert "128c::GemmKernel<128u, 4096u, 7168u>" in text and "128d::GemmKernel<128u, 4096u, 7168u>" in text
    assert max(map(len, text.splitlines())) <= 100
    # wide enough: every column stays
    assert "not shown" not in render(table, "table", width=200)
