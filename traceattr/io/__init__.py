"""Reading Kineto traces: discover files and ranks, decode JSON fast into int64-ns columnar tables.

    load(path, *, skip_bad=False, rank_map=None, jobs=None, executor=None, cache=True, progress=False)
        -> TraceSet                                               (traceattr.io.load; a trace path or a store)
    decode_file(path) -> DecodedFile                               (traceattr.io.decode; picklable, per file)
    assemble(decoded_files, ...) -> TraceSet                       (ranks and windows for files decoded elsewhere)

Modules: gzipstream (open by magic bytes, streaming inflate), splitter (typed chunked decode of
traceEvents), events (msgspec structs), fastscan/scanned/_scan.c (the optional compiled scanner: event
bytes straight to columns, msgspec as its fallback), columns (chunk -> columns, categories), timeconv (exact eras),
header (top-level keys), discover (files, ranks, windows), codes (per-file string/id tables), parallel
(process pool or any Executor, progress), cache (decoded files beside the traces), results (finished
tables), store (parquet dataset, `traceattr convert`), summaries (capture-time kernel summaries), cluster
(Dask executor).
"""
