"""The header as people read it: notes that earn their line, jargon behind -v.

* identical notes become one, with a count; notes that differ only in a rank number become one line naming
  the ranks ("ranks 0-7: only 0.0% ..."); notes that say the same of several files ("FILE: text") become one
  line naming how many files and the first ("16 files (first w0_rank0.json): text");
* paths under the PATH argument are shown relative to it (a file given as PATH: its name);
* a people format's header shows at most MAX_NOTES of them, then how many more and how to see them;
* facts that only explain the loader's workings (JARGON) are shown with -v only.
The full header stays what the API returns, what the cache stores and what parquet's metadata holds.
"""

from __future__ import annotations

import os
import re

MAX_NOTES = 5
# header keys shown with -v only: how the traces were read, not what they say (summarize --help explains them)
JARGON = ("eras", "rank_sources", "communication by rule")
_RANK = re.compile(r"\brank (\d+)\b")
_FILE_NOTE = re.compile(r"^(\S+\.(?:json|gz)): (.+)$", re.S)     # "FILE: text", as per-file notes are written


def shown_header(header: dict | None, path=None, *, verbose: bool = False, all_notes: bool = False,
                 limit: bool = True) -> dict | None:
    """A copy of `header` for display. `limit`: a people format's box (at most MAX_NOTES notes, unless
    `all_notes`); stderr lines are collapsed and relative but all there."""
    if header is None:
        return None
    out = {key: value for key, value in header.items() if verbose or key not in JARGON}
    if not verbose and out.get("host_only") is False:      # said only when it is so
        out.pop("host_only")
    notes = collapsed(by_file([relative(str(note), path) for note in header.get("notes", [])]))
    if limit and not all_notes and len(notes) > MAX_NOTES + 1:
        more = len(notes) - MAX_NOTES
        notes = notes[:MAX_NOTES] + [f"{more} more notes: --notes shows them all (traceattr check PATH checks "
                                     "the files)"]
    if "notes" in out:
        out["notes"] = notes
    return out


def relative(note: str, path) -> str:
    """`note` with the PATH argument's folder left out of the paths it names (a file given as PATH: its
    folder). Decided from the text alone: a stat per note would touch the trace file once per note."""
    if path is None:
        return note
    typed = os.fspath(path).rstrip(os.sep)
    if not typed:
        return note
    if typed + os.sep in note:                   # a folder PATH (or a file's path inside it)
        return note.replace(typed + os.sep, "")
    folder = os.path.dirname(typed)
    return note.replace(folder + os.sep, "") if folder and typed in note else note


def by_file(notes: list[str]) -> list[str]:
    """Notes that say the same text of several files as one line: how many files, and the first. In the
    order each text first came; a text said of one file stays as it was."""
    files: dict[str, list[str]] = {}
    order: list[tuple[str, str]] = []          # ("text", text) or ("note", note) in first-seen order
    for note in notes:
        found = _FILE_NOTE.match(note)
        if found is None:
            order.append(("note", note))
            continue
        path, text = found.groups()
        if text not in files:
            files[text] = []
            order.append(("text", text))
        files[text].append(path)
    out = []
    for kind, value in order:
        if kind == "note":
            out.append(value)
            continue
        paths = list(dict.fromkeys(files[value]))
        out.append(f"{paths[0]}: {value}" if len(paths) == 1 else
                   f"{len(paths)} files (first {paths[0]}): {value}")
    return out


def collapsed(notes: list[str]) -> list[str]:
    """Identical notes as one with a count; notes alike but for one rank number as one naming the ranks.
    In the order each first came."""
    groups: dict[str, list] = {}
    for note in notes:
        ranks = _RANK.findall(note)
        template = _RANK.sub("rank #", note) if len(ranks) == 1 else note
        group = groups.setdefault(template, [note, [], 0])
        group[2] += 1
        if len(ranks) == 1:
            group[1].append(int(ranks[0]))
    out = []
    for template, (first, ranks, count) in groups.items():
        distinct = sorted(set(ranks))
        if len(distinct) > 1:
            text = _RANK.sub(f"ranks {rank_list(distinct)}", first, count=1)
            repeats = count - len(distinct)
        else:
            text, repeats = first, count - 1
        out.append(text if not repeats else f"{text} ({repeats + 1} times)")
    return out


def rank_list(ranks: list[int]) -> str:
    """0, 1, 2, 3, 5 -> "0-3, 5"."""
    parts, start = [], None
    for i, rank in enumerate(ranks):
        if start is None:
            start = rank
        if i + 1 == len(ranks) or ranks[i + 1] != rank + 1:
            parts.append(str(start) if start == rank else f"{start}-{rank}")
            start = None
    return ", ".join(parts)
