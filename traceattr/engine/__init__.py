"""The engine: every answer computed one way, per file, and reduced exactly.

    units.py      a file as a map step sees it (alone, rank 0, window 0), from disk or from a loaded TraceSet
    partial.py    an analysis as a partial: map(Unit) -> part; state() with update / combine / finalize
    placement.py  each file's rank and window, placed once from every file's header facts (or given)
    runner.py     where maps run: this process, a process pool, a Dask cluster; or a TraceSet in memory
    columns.py    numpy columns on their way to the driver, tagged with their file's position
    convert.py    `traceattr convert`: each file's partitions written where it is mapped, the store sealed once

docs/design.md says how to add an analysis.
"""
