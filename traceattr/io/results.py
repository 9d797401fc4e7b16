"""Cached report tables: the second `summarize` of unchanged traces reads its finished table.

Key: the cache key of every input file (absolute path, size, mtime_ns, cache format, code fingerprint; for a
store, its metadata file) plus the request (command, level, --top, ...). Stored as
`<cache folder>/results/<key>.parquet`, the header and title in the parquet metadata, written atomically.
Anything unreadable is a miss. The table is stored exactly as computed (pandas dtypes kept by pyarrow).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from traceattr.io.cache import cache_dir_for, file_key
from traceattr.io.discover import find_trace_files
from traceattr.io.store import MARKER, is_store
from traceattr.io.summaries import is_capture_manifest

_META_KEY = b"traceattr.result"


def result_key(path: str | os.PathLike, request: dict) -> str:
    """Hex key of (input files as they are now, request, code)."""
    if is_store(path):
        inputs = [file_key(str(Path(path) / MARKER))]
    else:
        inputs = [file_key(str(f)) for f in find_trace_files(path) if not is_capture_manifest(f)]
    text = json.dumps([inputs, request], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _location(path: str | os.PathLike, key: str) -> Path:
    return cache_dir_for(path) / "results" / f"{key}.parquet"


def get_result(path: str | os.PathLike, key: str):
    """(table, header, title) or None."""
    try:
        import pyarrow.parquet as pq

        arrow = pq.read_table(_location(path, key))
        meta = json.loads(arrow.schema.metadata[_META_KEY])
        return arrow.to_pandas(), meta["header"], meta["title"]
    except Exception:      # noqa: BLE001 - missing or damaged: compute again
        return None


def put_result(path: str | os.PathLike, key: str, table, header: dict, title: str | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from traceattr.io.cache import _write_atomic_table

    try:
        plain = table.copy()
        plain.attrs = {}      # analysis attrs (tuple keys) are not stored; the header carries what is shown
        arrow = pa.Table.from_pandas(plain, preserve_index=False)
        metadata = dict(arrow.schema.metadata or {})
        metadata[_META_KEY] = json.dumps({"header": header, "title": title}, default=_plain).encode()
        target = _location(path, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic_table(arrow.replace_schema_metadata(metadata), target)
    except Exception:      # noqa: BLE001 - a result that cannot be cached only costs speed next time
        pass


def _plain(value):
    """numpy scalars and other JSON strangers: their Python value, else their text."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)
