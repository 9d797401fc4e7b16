"""The first stage of a folder with graph-capture traces: which files are captures, and their catalog.

A capture trace (the profiler running while CUDA/HIP graphs were captured: SGLang's and vLLM's
`capture_traces/`) is never a window nor a rank: its launches ran no kernel, and as a window it added its
own span and idle time. Candidates are the files named by `--graph-capture` (a file or a folder) and the
trace files of a folder holding `execution_details.json` (the engines write one beside their captures) or
named `capture_traces`;
each is decoded once through the runner (or read from the file cache) and read into a small GraphCatalog
(attribution/graphs.py) when it holds a capture range. The catalog then travels with every replay file's map
step (engine.units.UnitTask), so each replay file is still decoded once and attributed on its own.
A candidate without a capture range stays an ordinary trace file.
"""

from __future__ import annotations

import functools
import json
import os

from traceattr.analysis.shape_keys import call_rows
from traceattr.attribution.graphs import capture_catalog, merged_catalog
from traceattr.attribution.links import link
from traceattr.engine.runner import Runner
from traceattr.engine.units import Unit, UnitTask
from traceattr.errors import TraceError
from traceattr.io.cache import FileCache
from traceattr.io.discover import FoundFile, discover
from traceattr.io.parallel import as_executor
from traceattr.io.store import is_store
from traceattr.io.failure import FileFailure
from traceattr.io.limits import read_at_most
from traceattr.units import digits_int
from traceattr.captures import GIVEN_CAPTURES
from traceattr.model.graphs import NO_CODE, GraphCatalog

EXECUTION_DETAILS = "execution_details.json"
CAPTURE_FOLDER = "capture_traces"
_MAX_DETAILS_BYTES = 1 << 20            # a list of a few dozen captures; more is not this file


def graph_captures(runner: Runner, inputs, files: list, graph_capture=()) -> tuple[GraphCatalog, list, list[str]]:
    """(the catalog, the trace files that are not captures, notes) for the files of `inputs` and the
    paths given with --graph-capture."""
    notes: list[str] = []
    sizes: dict[str, int] = {}
    candidates: list = []
    # execution_details.json is found as a .json file: it is read here, not decoded as a trace
    details = [f for f in files if os.path.basename(str(f)) == EXECUTION_DETAILS]
    files = [f for f in files if os.path.basename(str(f)) != EXECUTION_DETAILS]
    by_text = {str(f): f for f in files}
    for found in details:
        sizes.update(_execution_details(str(found), notes))
    folders = {os.path.dirname(str(found)) for found in details}
    # SGLang's and TraceLens's folder name for captures marks them even without execution_details.json
    candidates += [f for f in files if os.path.dirname(str(f)) in folders
                   or os.path.basename(os.path.dirname(str(f))) == CAPTURE_FOLDER]
    given = []
    for path in dict.fromkeys(tuple(graph_capture) + GIVEN_CAPTURES.get()):
        try:
            listed = discover(path).trace_files()
        except TraceError as exc:            # one line naming the path, never a traceback
            notes.append(f"--graph-capture {path}: {' '.join(str(exc).split())}")
            continue
        for found in listed:
            if os.path.basename(found) == EXECUTION_DETAILS:
                sizes.update(_execution_details(found, notes))
            else:
                given.append(found)
    # one file named twice (found beside execution_details.json and given, as typed two ways) is one capture:
    # the file each walk's stat found, no second look
    unique, seen = [], set()
    for candidate in candidates + given:
        if _identity(candidate) not in seen:
            seen.add(_identity(candidate))
            unique.append(str(candidate))
    found_as = {**{str(g): g for g in given}, **by_text}      # each with the stat its walk took
    candidates, given = unique, set(map(str, given))
    if not candidates:
        return GraphCatalog(notes=tuple(notes)), files, notes
    task = UnitTask(functools.partial(_catalog_of, sizes=sizes))
    catalogs = []
    for path, result in zip(candidates, runner.map([found_as.get(c, c) for c in candidates], task)):
        if isinstance(result, FileFailure):
            notes.append(f"graph capture {path} cannot be read ({result.problem}): its replays are attributed to "
                         "their graph launches")
        elif result:
            catalogs.append(result)
            unclosed = [g for g in result.graphs if not g.closed]
            if unclosed:
                notes.append(f"graph capture {path}: {len(unclosed)} of {len(result.graphs)} captures are not "
                             f"closed (the file ends inside them: truncated); their launches so far are used")
        elif path in given:
            notes.append(f"--graph-capture {path}: no launch inside a *StreamBeginCapture..*StreamEndCapture "
                         "range whose kernel never ran: read as an ordinary trace")
    captures = {p for c in catalogs for p in c.captures}
    kept = [f for f in files if str(f) not in captures]
    return merged_catalog(catalogs, notes), kept, notes


def _identity(found) -> tuple:
    """The file a found path names (links followed): the walk's stat of it, else its real path."""
    return (found.stat.st_dev, found.stat.st_ino) if isinstance(found, FoundFile) else (os.path.realpath(found),)


def _catalog_of(unit: Unit, sizes: dict[str, int]) -> GraphCatalog:
    """The map step of a candidate: its captured graphs (an empty catalog when it holds none)."""
    size = sizes.get(os.path.basename(unit.path), NO_CODE)
    # each launch keeps the args of the op call the shape level counts its kernels for (the eager rule)
    return capture_catalog(unit.traceset, link(unit.traceset), unit.path, size, call_of=call_rows)


def _execution_details(path: str, notes: list[str]) -> dict[str, int]:
    """file name -> batch size from an execution_details.json ([{"file", "batch_size", "mode"}, ...]); a
    malformed one is a note and gives nothing."""
    try:
        entries = json.loads(read_at_most(path, _MAX_DETAILS_BYTES))
        if not isinstance(entries, list):
            raise ValueError("not a list of captures")
        sizes = {}
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
                raise ValueError("an entry without a `file` name")
            size = entry.get("batch_size")
            size = digits_int(str(size)) if isinstance(size, (int, str)) and not isinstance(size, bool) else None
            if size is None or not 0 < size < 2**31:
                raise ValueError(f"{entry['file'][:80]!r} has no batch size from 1 to 2**31")
            sizes[os.path.basename(entry["file"])] = size
        return sizes
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        notes.append(f"{path}: malformed ({' '.join(str(exc).split())[:120]}): batch sizes are read from the "
                     "captures' annotations and file names instead")
        return {}


def unused_captures(catalog: GraphCatalog, used: frozenset) -> list[str]:
    """A note per capture file some of whose graphs no replayed kernel matched."""
    unused: dict[str, list[int]] = {}
    for graph in catalog.graphs:
        if (graph.path, graph.index) not in used:
            unused.setdefault(graph.path, []).append(graph.index)
    totals = {path: sum(g.path == path for g in catalog.graphs) for path in unused}
    return [f"graph capture {path}: {len(found)} of {totals[path]} captured graphs match no replayed launch"
            for path, found in unused.items()]


def load_captures(path, graph_capture=(), *, jobs=None, executor=None, cache=True,
                  progress: bool = False) -> tuple[GraphCatalog, list[str], list[str]]:
    """The first stage for traceattr.load(): the catalog of the captures under `path` (and given), its
    notes, and the files load leaves out (the captures, execution_details.json); nothing for a store (it
    keeps its own catalog) or a path discovery refuses (load says why)."""
    try:
        inputs = discover(path)
        if is_store(inputs):
            return GraphCatalog(), [], []
        files = inputs.trace_files()
    except TraceError:
        return GraphCatalog(), [], []
    file_cache = FileCache.of(cache)
    folder = str(file_cache.dir.root) if file_cache is not None else None
    runner = Runner(jobs, as_executor(executor), folder, progress, inputs)
    catalog, _, notes = graph_captures(runner, inputs, files, graph_capture)
    if catalog.captures:
        notes.append(f"{len(catalog.captures)} graph capture file(s) are not windows: their "
                     f"{len(catalog.graphs)} captured graphs attribute the replays (docs/inference.md)")
    # beside captures, execution_details.json is theirs; elsewhere load says what it is (not a trace)
    details = [str(f) for f in files if os.path.basename(str(f)) == EXECUTION_DETAILS and catalog.captures]
    return catalog, notes, list(catalog.captures) + details
