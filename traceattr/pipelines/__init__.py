"""The command pipelines: discover a path, open its caches, stores and capture manifests, run the plans, and
hand finished tables to the renderers (traceattr.report, which never reads a file). Beside traceattr.api on
the floors; imports nothing heavy here (the cached answer starts without pandas)."""
