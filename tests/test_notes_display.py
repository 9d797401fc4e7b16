"""Notes that earn their line (report/notes.py): collapsed, relative to PATH, at most MAX_NOTES in the box,
jargon behind -v; and the judgements' wording (point 3 of issue 37)."""

from __future__ import annotations

import math

from traceattr.report.notes import JARGON, MAX_NOTES, collapsed, rank_list, relative, shown_header
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
