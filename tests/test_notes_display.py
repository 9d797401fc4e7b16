"""Notes that earn their line (report/notes.py): collapsed, relative to PATH, at most MAX_NOTES in the box,
jargon behind -v; and the judgements' wording (point 3 of issue 37)."""

from __future__ import annotations

import math

from traceattr.report.notes import JARGON, MAX_NOTES, by_file, collapsed, rank_list, relative, shown_header
from traceattr.units import p_text

from clirun import run_cli
from conftest import shared_trace


def test_identical_notes_become_one_with_a_count_and_per_rank_notes_one_naming_the_ranks():
    per_rank = [f"rank {r}: only 0.0% of device time has an nn.Module; the rest is <unattributed>" for r in range(8)]
    notes = ["skipped a.json: not a trace"] * 3 + per_rank + ["rank 3: only 12.5% of device time has an op"]
    assert collapsed(notes) == [
        "skipped a.json: not a trace (3 times)",
        "ranks 0-7: only 0.0% of device time has an nn.Module; the rest is <unattributed>",
        "rank 3: only 12.5% of device time has an op",
    ]
    assert rank_list([0, 1, 2, 3, 5, 7, 8]) == "0-3, 5, 7-8"


def test_paths_relative_to_the_path_argument(tmp_path):
    folder = tmp_path / "run"
    (folder / "sub").mkdir(parents=True)
    note = f"skipped {folder}/sub/rank1.json: truncated"
    assert relative(note, str(folder)) == "skipped sub/rank1.json: truncated"
    file = folder / "sub" / "rank1.json"
    file.write_text("{}")
    assert relative(f"rank assumed 0 for {file} (no distributedInfo)", str(file)) == \
        "rank assumed 0 for rank1.json (no distributedInfo)"


def test_at_most_max_notes_in_the_box_and_jargon_behind_verbose():
    header = {"busy_ns": 5, "eras": ["C"], "rank_sources": {0: "assumed 0"}, "communication by rule": "x",
              "host_only": False, "notes": [f"note {i}" for i in range(9)]}
    shown = shown_header(header)
    assert not set(JARGON) & set(shown) and "host_only" not in shown
    assert shown["notes"][:MAX_NOTES] == [f"note {i}" for i in range(MAX_NOTES)]
    assert shown["notes"][MAX_NOTES].startswith(f"{9 - MAX_NOTES} more notes: --notes")
    assert shown_header(header, all_notes=True)["notes"] == header["notes"]
    assert shown_header(header, limit=False)["notes"] == header["notes"]    # stderr: every note
    verbose = shown_header(header, verbose=True)
    assert set(JARGON) <= set(verbose) and verbose["host_only"] is False
    assert shown_header({**header, "host_only": True})["host_only"] is True


def test_shared_multirank_header_collapses_per_rank_notes():
    path = shared_trace("trace_filter")
    shown = run_cli("summarize", path, "--by", "module", "--no-cache")
    assert shown.returncode == 0, shown.stderr
    notes = [line for line in shown.stdout.splitlines() if "note:" in line]
    assert sum("only 0.0% of device time has an nn.Module" in line for line in notes) == 1
    assert any("ranks 0-1: only 0.0%" in line for line in notes)
    assert "eras:" not in shown.stdout and "rank sources" not in shown.stdout
    verbose = run_cli("summarize", path, "--by", "module", "--no-cache", "-v")
    assert "eras: A" in verbose.stdout and "rank sources" in verbose.stdout


def test_a_file_path_argument_names_files_by_their_name():
    path = shared_trace("tracelens/mi300/gaunernst_bert-small-uncased__1016001.json.gz")
    shown = run_cli("summarize", path, "--no-cache", "--format", "csv")
    notes = [line for line in shown.stderr.splitlines() if line.startswith("traceattr: note:")]
    assert notes and all(str(path.parent) not in line for line in notes)
    assert not any("unexpected type" in line for line in notes)       # ROCm's text `bytes` is a number


def test_p_values_as_people_read_them():
    assert p_text(0.0001) == "p < 0.01"
    assert p_text(0.234) == "p = 0.23"
    assert p_text(1.0) == "p = 1.00" and p_text(1.7) == "p = 1.00"
    assert p_text(math.nan) == "p n/a"


# --- judgements only as strong as the data -----------------------------------------------------------

def test_one_rank_measures_no_waiting_and_names_no_straggler(tmp_path):
    import json

    from traceattr.builder import TraceSpec, write_trace_set
    from tracesets import SMALL

    write_trace_set(tmp_path, TraceSpec(**SMALL))         # one rank, an all-reduce per step
    table = run_cli("summarize", tmp_path, "--by", "rank", "--no-cache", "-q")
    assert table.returncode == 0 and "n/a" in table.stdout and "straggler" not in table.stdout, table.stdout
    rows = json.loads(run_cli("summarize", tmp_path, "--by", "rank", "--no-cache", "--format", "json").stdout)
    assert rows[0]["communication_wait_ns"] is None and rows[0]["communication_transfer_ns"] is None
    assert rows[0]["communication_ns"] > 0


def test_clock_offsets_are_those_applied(tmp_path):
    import traceattr
    from traceattr import schema as S
    from traceattr.builder.multirank import MultiRankSpec, build_multirank

    build_multirank(MultiRankSpec(ranks=2, steps=3, clock_offset_ns={1: 3_000_000}), tmp_path)
    aligned = traceattr.summarize(str(tmp_path), by="rank", cache=False)
    assert dict(zip(aligned[S.RANK], aligned[S.CLOCK_OFFSET_NS])) == {0: 0, 1: 3_000_000}
    off = traceattr.summarize(str(tmp_path), by="rank", cache=False, align=False)
    assert off[S.CLOCK_OFFSET_NS].tolist() == [0, 0]      # not applied: no offset shown


def test_too_few_steps_for_a_noise_verdict_and_size_apart_from_significance():
    import pandas as pd

    from traceattr.analysis.compare import compare_units
    from traceattr.analysis.imbalance import _top_keys
    from traceattr.analysis.keys import UNIT_COLUMNS

    def units(rank, steps, big):
        rows = [(rank, 0, name, name, step, ns, 1) for step in range(steps) for name, ns in
                (("small", 10_000 + 100 * rank), ("big", 40_000 + big[step % 2] * rank))]
        return pd.DataFrame(rows, columns=UNIT_COLUMNS)

    two = compare_units(units(0, 2, (0, 0)), units(1, 2, (30_000, -20_000)), 2, 2)
    text = _top_keys(two, 3)
    # Σ over the steps: big +30 and -20 µs in turn (noise), small +100 ns in every step (beyond it)
    assert text == "largest: big +10.0 µs; small +200 ns (too few steps to test against step-to-step noise: 2)"
    ten = compare_units(units(0, 10, (0, 0)), units(1, 10, (30_000, -20_000)), 10, 10)
    assert _top_keys(ten, 3) == ("largest: big +50.0 µs; small +1.00 µs; beyond step-to-step noise: small +1.00 µs "
                                 "(+1.00 µs of the +51.0 µs)")


def test_a_straggler_verdict_never_prints_a_bound_as_a_p_value(tmp_path):
    import traceattr
    from traceattr.builder.multirank import MultiRankSpec, build_multirank

    build_multirank(MultiRankSpec(ranks=2, steps=2, extra_compute_ns={1: 200_000}), tmp_path)
    verdict = traceattr.imbalance(str(tmp_path), cache=False)
    assert verdict.too_few and ">=" not in verdict.summary()
    assert "too few collectives to test" in verdict.summary() and "would do that with p = " in verdict.summary()


def test_a_cached_answer_is_per_display_options(tmp_path):
    """The replayed answer of a repeated request must be the one its -v/--notes/--quiet asked for."""
    from traceattr.builder import TraceSpec, write_trace_set
    from tracesets import SMALL

    write_trace_set(tmp_path / "run", TraceSpec(memcpy_runtime="cudaMemcpy", **SMALL))
    cache = ["--cache-dir", str(tmp_path / "cache")]
    for _ in range(2):       # the second of each is a replay
        plain = run_cli("summarize", tmp_path / "run", *cache).stdout
        verbose = run_cli("summarize", tmp_path / "run", *cache, "-v").stdout
        quiet = run_cli("summarize", tmp_path / "run", *cache, "-q").stdout
        assert "eras: C" not in plain and "eras: C" in verbose
        assert "finding: " in plain and "finding: " not in quiet


def test_the_same_note_of_many_files_is_one_line_naming_how_many(tmp_path):
    """A per-file note said of 16 windows (e.g. graph launches without a capture) is one line, not 16."""
    notes = [f"w{w}_rank{r}.json: 6 kernels of 2 graph launches have no capture trace"
             for r in range(8) for w in range(2)] + ["check this", "w0_rank3.json: 1 event arg read as absent"]
    assert by_file(notes) == ["16 files (first w0_rank0.json): 6 kernels of 2 graph launches have no capture trace",
                              "check this", "w0_rank3.json: 1 event arg read as absent"]
    shown = shown_header({"notes": notes}, tmp_path)["notes"]
    assert len(shown) == 3 and shown[0].startswith("16 files")
