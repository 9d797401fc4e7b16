"""What the writer process makes of one exported window: the gzip trace, the kernel summary, the memory view.

Every function here runs in the writer process (traceattr.capture.worker), never in the training process,
so none of this work holds the training process's GIL or shows up in its traces. A file is either complete
under its final name or absent: everything is written to a hidden `.tmp` name first, then renamed.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import shutil
from pathlib import Path

from traceattr.capture.manifest import memory_view_name, record_name, temp_name, trace_name

try:   # isal is a dependency and about 5x faster; stdlib gzip keeps us working without it
    from isal import igzip as _gzip_module
except ImportError:   # pragma: no cover
    import gzip as _gzip_module

TOP_KERNELS = 10     # rows of the small per-window table sent back to the profiler (status.kernels)


def kernel_summary_schema():
    """The summary parquet: the columns of traceattr.summarize(ts, by="kernel"). pyarrow is imported only
    here, so a capture without summaries runs where the analysis stack is not installed."""
    import pyarrow as pa  # lazy: pyarrow (schema imports it too): only the writer process making kernel summaries needs it

    from traceattr import schema as S  # lazy: pyarrow (schema imports it too): only the writer process making kernel summaries needs it

    return pa.schema([
        (S.RANK, pa.int32()), (S.DEVICE, pa.int64()), (S.NAME, pa.string()), (S.CATEGORY, pa.string()),
        (S.COUNT, pa.int64()), (S.DURATION_NS, pa.int64()), (S.SELF_NS, pa.int64()), (S.SOLO_NS, pa.int64()),
        (S.SELF_PCT, pa.float64()),
    ])


def __getattr__(name: str):
    if name == "KERNEL_SUMMARY_SCHEMA":
        return kernel_summary_schema()
    raise AttributeError(name)


def copy_trace(src: Path, dst: Path, compress: bool, prepend_header: str = "") -> None:
    """Stream src to dst (gzip-compressed when asked), inserting header keys after the opening brace."""
    opener = (lambda p: _gzip_module.open(p, "wb")) if compress else (lambda p: open(p, "wb"))
    try:
        with open(src, "rb") as fin, opener(dst) as fout:
            if prepend_header:
                head = fin.read(1 << 16)
                brace = head.index(b"{")
                fout.write(head[:brace + 1] + prepend_header.encode() + head[brace + 1:])
            shutil.copyfileobj(fin, fout, 1 << 20)
    except BaseException:
        dst.unlink(missing_ok=True)
        raise


def write_kernel_summary(trace_path: Path, tmp: Path, final: Path) -> int:
    """Exact per-kernel self time of one window via the analysis core (same code as `summarize`)."""
    return len(write_kernel_summary_table(trace_path, tmp, final))


def write_kernel_summary_table(trace_path: Path, tmp: Path, final: Path):
    """Write the summary parquet atomically; return it as a pyarrow table."""
    import pyarrow.parquet as pq  # lazy: pyarrow (schema imports it too): only the writer process making kernel summaries needs it

    table = kernel_summary_table(trace_path)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return table


def kernel_summary_table(trace_path: Path):
    import pyarrow as pa  # lazy: pyarrow (schema imports it too): only the writer process making kernel summaries needs it

    import traceattr  # lazy: the analysis package, in the writer process only

    schema = kernel_summary_schema()
    frame = traceattr.summarize(traceattr.load(str(trace_path), cache=False, jobs=1), by="kernel")
    if len(frame) == 0:
        return schema.empty_table()
    missing = [c for c in schema.names if c not in frame.columns]
    if missing:
        raise ValueError(f"summarize(by='kernel') lacks columns {missing}")
    columns = {c: pa.array(frame[c].to_numpy(), type=schema.field(c).type) for c in schema.names}
    return pa.table(columns, schema=schema)


def top_kernels(table, top: int = TOP_KERNELS) -> list[dict]:
    """The `top` rows with the most self time, as plain dicts (they travel as JSON to the profiler)."""
    from traceattr import schema as S  # lazy: pyarrow (schema imports it too): only the writer process making kernel summaries needs it

    if table.num_rows == 0:
        return []
    ordered = table.sort_by([(S.SELF_NS, "descending"), (S.NAME, "ascending")]).slice(0, top)
    return ordered.to_pylist()


def write_memory_view(snapshot_pickle: Path, html_path: Path) -> bool:
    """The allocator timeline as HTML, by torch's own torch.cuda._memory_viz; False when torch lacks it."""
    viz = _memory_viz_module()
    if viz is None or not hasattr(viz, "trace_plot"):
        return False
    with open(snapshot_pickle, "rb") as handle:
        snapshot = pickle.load(handle)
    tmp = html_path.with_name(f".{html_path.name}.tmp")
    try:
        tmp.write_text(viz.trace_plot(snapshot))
        os.replace(tmp, html_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def _memory_viz_module():
    """torch/cuda/_memory_viz.py loaded by file: it imports only the standard library at module level, so
    the writer process need not import torch (seconds, hundreds of MB) to draw the timeline."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "cuda" / "_memory_viz.py"
    if not path.is_file():
        return None
    module_spec = importlib.util.spec_from_file_location("_traceattr_torch_memory_viz", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def remove_temporaries(job: dict) -> None:
    """The hidden files a writer process that died left of a window: its half-written gzip, copy, summary,
    memory view, and the pickled snapshot it was given."""
    folder, window = Path(job["rank_dir"]), job["window"]
    names = [temp_name(window, stage) for stage in ("gz", "json", "kernels", "memory")]
    names.append(f".{memory_view_name(window)}.tmp")
    names += [p.name for p in folder.glob(f"{record_name(window)}.*.tmp")]    # a record cut short
    for name in names:
        try:
            (folder / name).unlink(missing_ok=True)
        except OSError:
            pass


def rescue_export(job: dict) -> Path | None:
    """Rename torch's export to the plain trace name, unless the rank still had to be inserted into it."""
    raw = Path(job["raw"])
    plain = Path(job["rank_dir"]) / trace_name(job["window"], False)
    try:
        if raw.exists() and not job["prepend_header"]:
            os.replace(raw, plain)
            return plain
        raw.unlink(missing_ok=True)
    except OSError:
        pass
    return None
