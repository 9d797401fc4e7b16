"""Cached report tables: the second `summarize` of unchanged traces reads its finished table.

Key: the cache key of every input file (absolute path, size, mtime_ns, inode, ctime_ns, cache format, code
fingerprint; for a store, its metadata file), the request (command, level, --top, ...) and PATH as typed
(with the working folder when relative: stored notes name files that way). Stored as a `results` entry of the
cache folder (traceattr.io.cachedir): the table as parquet, the header and title as facts. What is read back
is checked before it is served: the content hash, the header's types, every column's name and type, and the
law every summary table keeps (Σ self_ns, or Σ busy_ns by rank, == the header's busy_ns). Anything else is a
miss. Imports no pandas or pyarrow until a table is read or written: `result_key` serves the fast path.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from traceattr.io.cachedir import CacheDir, CacheEntryError, file_key
from traceattr.io.discover import STORE, STORE_MARKER, discover, stat_of
from traceattr.io.gzipstream import InflateLimit

KIND = "results"
_INTEGER_COLUMNS = ("rank", "device", "count", "depth", "activities")   # and every `*_ns` column
# the levels whose table keeps Σ self_ns (by rank: Σ busy_ns) == busy_ns (design.md, conservation laws)
CONSERVING_LEVELS = ("kernel", "category", "rank", "op", "op_stack", "module", "module_class", "annotation",
                     "step", "shape", "launch")


CACHED_SOURCE = "cached result (inputs unchanged since it was computed)"


def summary_request(by: str, top: int | None, skip_bad: bool, rank_map: dict | None,
                    per_rank: bool = False, multirank: dict | None = None, exclude_carried_in: bool = False) -> dict:
    """What, besides the inputs, a cached summarize table depends on (`multirank`: multirank_options). The
    --max-inflate and --max-events limits too: under --skip-bad they decide which files are read (an answer stored under a low
    limit left a rank out, and was served again after the limit was raised)."""
    limit = InflateLimit.current()
    return {"command": "summarize", "by": by, "top": top, "skip_bad": skip_bad, "rank_map": rank_map,
            "per_rank": per_rank, "max_inflate": [limit.max_bytes, limit.max_ratio],
            "max_events": limit.max_events, "exclude_carried_in": exclude_carried_in,
            **(multirank or multirank_options())}


def multirank_options(comm_patterns=(), align: bool = True, aggregate: bool = False,
                      peaks: tuple[float | None, float | None] = (None, None)) -> dict:
    """The options of summarize that change which kernels are communication and the cross-rank figures;
    and --peak-tflops / --peak-tbps of --by shape, when given (absent otherwise: earlier keys stay valid)."""
    options = {"comm_patterns": list(comm_patterns), "align": align, "aggregate": aggregate}
    if any(peak is not None for peak in peaks):
        options["peaks"] = list(peaks)
    return options


def cached_header(header: dict) -> dict:
    """The header a table served from the cache shows: the computed one, with its source."""
    return {**header, "source": CACHED_SOURCE}


def result_key(path: str | os.PathLike, request: dict) -> str:
    """Hex key of (input files as discovered, request, code). Raises TraceError when `path` holds no
    traces (the caller then reads them and reports the problem). `path` may be an io.discover.Inputs."""
    found = discover(path)
    if found.kind == STORE:
        inputs = [file_key(str(Path(path) / STORE_MARKER), found.marker_stat)]
    else:
        # capture manifests too: a stored answer shows their problems (report/summarize.capture_notes)
        inputs = [file_key(f, stat_of(f)) for f in found.found_files(noted=False)]
    # the notes and headers stored name files as typed: another spelling, or a relative path typed in another
    # folder, is another answer (a replay named `../run/x.json` from where no such path exists)
    typed = os.fspath(path)
    where = "" if os.path.isabs(typed) else _cwd()
    text = json.dumps([inputs, request, typed, where], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:         # the folder was removed under us: relative paths then name nothing anyway
        return ""


def get_result(key: str, cache: CacheDir, required: tuple[str, ...] = (), conserving: bool = False):
    """(pandas table, header, title) or None. `required`: columns the table must have; `conserving`: it must
    add up to the header's busy time."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from traceattr.io.parquet import arrow_owned  # lazy: imports pyarrow, which a cached answer never needs

        facts, blobs = cache.read(KIND, key, {"key": key}, ("table",))
        header, title = facts["header"], facts["title"]
        arrow = pq.read_table(pa.BufferReader(arrow_owned(blobs["table"])))
        if not set(required) <= set(arrow.schema.names):
            raise CacheEntryError(f"columns {arrow.schema.names} lack some of {list(required)}")
        _check(arrow, header, title, conserving)
        return arrow.to_pandas(), header, title
    except Exception:      # noqa: BLE001 - missing, damaged, foreign or forged: compute again
        return None


def put_result(key: str, cache: CacheDir, table, header: dict, title: str | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        plain = table.copy()
        plain.attrs = {}      # analysis attrs (tuple keys) are not stored; the header carries what is shown
        arrow = pa.Table.from_pandas(plain, preserve_index=False)
        facts = {"header": json.loads(json.dumps(header, default=_plain)), "title": title}
        cache.write(KIND, key, {"key": key}, facts,
                    {"table": lambda target: pq.write_table(arrow, target, compression="zstd")})
    except Exception:      # noqa: BLE001 - a result that cannot be cached only costs speed next time
        pass


def _check(arrow, header, title, conserving: bool) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(header, dict) or not (title is None or isinstance(title, str)):
        raise CacheEntryError("header or title of the wrong type")
    for name, value in header.items():
        if name.endswith("_ns") and (type(value) is not int or abs(value) >= 1 << 63):
            raise CacheEntryError(f"header {name} is not an int64")
        if name == "notes" and not (isinstance(value, list) and all(isinstance(n, str) for n in value)):
            raise CacheEntryError("header notes are not a list of text")
    for field in arrow.schema:
        kind = field.type
        if field.name.endswith("_ns") or field.name in _INTEGER_COLUMNS:
            allowed = pa.types.is_integer(kind)
        else:
            allowed = (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_string(kind)
                       or pa.types.is_large_string(kind) or pa.types.is_boolean(kind))
        if not allowed:
            raise CacheEntryError(f"column {field.name} is {kind}")
    host_time = any("time, not device time" in note for note in header.get("notes", []))
    total = "busy_ns" if "busy_ns" in arrow.schema.names else "self_ns"
    if not conserving or host_time or total not in arrow.schema.names:
        return
    if "busy_ns" not in header or (pc.sum(arrow[total]).as_py() or 0) != header["busy_ns"]:
        raise CacheEntryError(f"Σ {total} != the header's busy_ns")


def _plain(value):
    """numpy scalars and other JSON strangers: their Python value, else their text."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)
