"""The `traceattr` command. Each command is a few lines over the public API plus one renderer.

New commands (compare, convert, ...) go in this file as `@main.command()` functions, following `summarize`.
Any TraceError raised inside a command becomes one line on stderr and the error's exit code.
"""

from __future__ import annotations

import os
import shutil
import sys

import click

from traceattr import __version__
from traceattr.errors import TraceError, TraceInputError

SUMMARY_LEVELS = ("kernel", "category", "rank")
ATTRIBUTION_LEVELS = ("op", "op_stack", "module", "annotation", "step")
FORMATS = ("table", "csv", "json", "markdown", "parquet")   # == traceattr.report.render.FORMATS


class TraceattrGroup(click.Group):
    """Turns TraceError into `traceattr: error: <message>` and its exit code, without a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TraceError as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            click.echo(f"traceattr: error: {message}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:   # workers are already stopped by the loader; no traceback for Ctrl-C
            click.echo("traceattr: interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:   # `traceattr ... | head`: the reader left; exit quietly like other tools
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            ctx.exit(1)


@click.group(cls=TraceattrGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="traceattr")
def main() -> None:
    """Exact device-time attribution for PyTorch profiler (Kineto) traces."""


def emit(table, header: dict | None, fmt: str, output: str | None, title: str | None = None) -> None:
    """Render a result table and print it (or write it to `output`)."""
    from traceattr.report.render import render

    width = max(100, shutil.get_terminal_size((160, 24)).columns)
    text = render(table, fmt, header=header, output=output, title=title, width=width)
    if text is not None:
        click.echo(text, nl=False)


def _attribute(traceset, by: str, top: int | None, tree: bool = False):
    try:
        from traceattr.analysis.attribute import attribute
    except ModuleNotFoundError as exc:
        if exc.name != "traceattr.analysis.attribute":
            raise
        raise TraceError(f"--by {by} needs traceattr.analysis.attribute, which this installation lacks") from None
    # a tree folds per level when rendered; a flat table folds below --top into <other> (still adds up)
    return attribute(traceset, by=by, tree=tree, top=None if tree else top)


def load_options(command):
    """--jobs, --quiet, --no-cache, --scheduler: how the traces are decoded (traceattr.io.parallel/cache)."""
    command = click.option("--scheduler", metavar="ADDRESS", default=None,
                           help="Decode the files on this Dask scheduler (tcp://host:8786).")(command)
    command = click.option("--no-cache", is_flag=True,
                           help="Neither read nor write the parquet cache kept beside the traces.")(command)
    command = click.option("-q", "--quiet", is_flag=True, help="No progress bar on stderr.")(command)
    return click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
                        help="Files decoded at once (default: the available cores).")(command)


def load_traces(path: str, *, skip_bad: bool, jobs: int | None, quiet: bool, no_cache: bool,
                scheduler: str | None):
    """(TraceSet, source text for the header): a store, or traces decoded in parallel / served from cache."""
    import contextlib

    import traceattr
    from traceattr.io.cache import FileCache, cache_dir_for
    from traceattr.io.store import is_store

    if is_store(path):
        return traceattr.load(path), f"parquet store {path}"
    file_cache = None if no_cache else FileCache(cache_dir_for(path))
    executor = contextlib.nullcontext()
    if scheduler:
        from traceattr.io.cluster import dask_executor
        executor = dask_executor(scheduler)
    with executor as pool:
        traceset = traceattr.load(path, skip_bad=skip_bad, jobs=jobs, executor=pool, progress=not quiet,
                                  cache=file_cache if file_cache is not None else False)
    if file_cache is None:
        return traceset, "traces (cache off)"
    # short: a long cache path would wrap the header line it sits on (docs/scale.md says where the cache is)
    return traceset, f"traces ({file_cache.misses} decoded, {file_cache.hits} from cache)"


@main.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--by", type=click.Choice(SUMMARY_LEVELS + ATTRIBUTION_LEVELS), default="kernel",
              show_default=True, help="What each row is.")
@click.option("--top", type=click.IntRange(min=1), default=None,
              help="Largest N rows per (rank, device); the rest is summed into one <other> row.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write to this file instead of stdout (required for parquet).")
@click.option("--skip-bad", is_flag=True, help="Skip unreadable trace files with a note instead of failing.")
@click.option("--tree", is_flag=True, help="With --by op_stack|module|annotation: the path tree with inclusive "
              "and exclusive self time (--top N children per level).")
@click.option("--links", "show_links", is_flag=True,
              help="Show the link report (kernel -> launch -> op) instead of a table.")
@load_options
def summarize(path: str, by: str, top: int | None, fmt: str, output: str | None, skip_bad: bool,
              tree: bool, show_links: bool, jobs: int | None, quiet: bool, no_cache: bool,
              scheduler: str | None) -> None:
    """Where the device time of the traces under PATH went: exact self time that adds up to busy time."""
    if fmt == "parquet" and output is None:
        raise TraceInputError("--format parquet writes binary: give a file with -o FILE")
    import traceattr      # heavy imports only once the arguments are known to be good

    fallback = None
    if by in SUMMARY_LEVELS and not (tree or show_links):
        from traceattr.io.summaries import capture_header, capture_summary
        found = capture_summary(path, by, top)   # a traceattr.capture folder: its parquet summaries
        if found is not None and found.table is not None:
            emit(found.table, capture_header(found), fmt, output, title=f"device time by {by}")
            return
        fallback = found.reason if found is not None else None
    result_key = None
    if not (no_cache or tree or show_links):   # finished tables of unchanged inputs (traceattr.io.results)
        from traceattr.io.results import get_result, result_key as key_of
        result_key = key_of(path, {"command": "summarize", "by": by, "top": top, "skip_bad": skip_bad})
        cached = get_result(path, result_key)
        if cached is not None:
            table, header, title = cached
            header["source"] = "cached result (inputs unchanged since it was computed)"
            emit(table, header, fmt, output, title=title)
            return
    from traceattr.analysis.summarize import summary_header

    traceset, source = load_traces(path, skip_bad=skip_bad, jobs=jobs, quiet=quiet, no_cache=no_cache,
                                   scheduler=scheduler)
    if show_links:
        from traceattr.analysis.attribute import link_report
        emit(link_report(traceset), summary_header(traceset), fmt, output, title="link report")
        return
    if tree and by in SUMMARY_LEVELS:
        raise TraceInputError("--tree needs --by op_stack, module or annotation")
    if by in SUMMARY_LEVELS:
        table = traceattr.summarize(traceset, by=by, top=top)
    else:
        table = _attribute(traceset, by, top, tree)
    header = summary_header(traceset)
    header["source"] = source
    if fallback:
        header["notes"].append(fallback)
    if "linked_share" in table.attrs:   # the trust figure of attribution tables, and plain warnings
        header["linked share"] = {r: "n/a" if v != v else f"{100 * v:.1f}%" for r, v in table.attrs["linked_share"].items()}
        header["notes"].extend(table.attrs.get("notes", []))
    if by in ("rank", "step") and traceset.device.num_rows:   # imbalance: straggler / outlier step and why
        from traceattr.analysis.imbalance import rank_facts, step_facts
        facts, notes = (rank_facts if by == "rank" else step_facts)(traceset)
        header.update(facts)
        header["notes"].extend(notes)
    time_kind = table.attrs.get("time_kind", "device")   # attribute() reports host time on CPU-only traces
    if time_kind != "device":
        header["notes"].append(f"the table holds {time_kind} time, not device time")
    if tree and fmt == "table":
        from traceattr.report.shape import header_lines
        from traceattr.report.tree import render_tree
        facts, notes = header_lines(header)
        text = "\n".join(facts + [f"note: {n}" for n in notes]) + "\n\n" + render_tree(table, top or 10)
        if output is None:
            click.echo(text, nl=False)
        else:
            with open(output, "w", encoding="utf-8") as handle:
                handle.write(text)
        return
    if result_key is not None:
        from traceattr.io.results import put_result
        put_result(path, result_key, table, header, f"{time_kind} time by {by}")
    emit(table, header, fmt, output, title=f"{time_kind} time by {by}")


COMPARE_LEVELS = ("kernel", "category", "op", "op_stack", "module", "annotation", "step")


@main.command()
@click.argument("path_a", type=click.Path(path_type=str))
@click.argument("path_b", type=click.Path(path_type=str))
@click.option("--by", type=click.Choice(COMPARE_LEVELS), default="kernel", show_default=True,
              help="What each row is.")
@click.option("--top", type=click.IntRange(min=1), default=None,
              help="Largest N rows by |delta|; the rest is summed into one <other> row.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write to this file instead of stdout (required for parquet).")
@click.option("--skip-bad", is_flag=True, help="Skip unreadable trace files with a note instead of failing.")
@click.option("--no-normalize", is_flag=True, help="Join on raw names (no template/hash/arch reduction).")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Significance level of the per-step noise test.")
@click.option("--fail-on-regression", "fail_pct", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 1 when the total or a key is slower by more than PCT percent beyond noise.")
def compare(path_a: str, path_b: str, by: str, top: int | None, fmt: str, output: str | None,
            skip_bad: bool, no_normalize: bool, alpha: float, fail_pct: float | None) -> None:
    """What changed from run A to run B: exact self time per key, deltas that add up, noise-aware status.

    Exit status: 0 (no regression, or no --fail-on-regression), 1 (a regression beyond noise), 2 (bad input).
    """
    if fmt == "parquet" and output is None:
        raise TraceInputError("--format parquet writes binary: give a file with -o FILE")
    import traceattr
    from traceattr.analysis.compare import regressions
    from traceattr.report.compare import compare_header, for_format

    a = traceattr.load(path_a, skip_bad=skip_bad)
    b = traceattr.load(path_b, skip_bad=skip_bad)
    table = traceattr.compare(a, b, by=by, normalize=not no_normalize, alpha=alpha, top=top)
    emit(for_format(table, fmt), compare_header(table, path_a, path_b), fmt, output, title=f"compare by {by}")
    if fail_pct is not None:
        slower = regressions(table, fail_pct)
        if len(slower):
            names = ", ".join(slower["key"].head(5).tolist())
            click.echo(f"traceattr: regression beyond noise (> {fail_pct:g}%): {names}", err=True)
            sys.exit(1)


@main.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("-o", "--output", "store", type=click.Path(path_type=str), required=True,
              help="The store folder to write (a parquet dataset; see docs/scale.md).")
@click.option("--force", is_flag=True, help="Replace an existing store.")
@click.option("--skip-bad", is_flag=True, help="Skip unreadable trace files with a note instead of failing.")
@load_options
def convert(path: str, store: str, force: bool, skip_bad: bool, jobs: int | None, quiet: bool, no_cache: bool,
            scheduler: str | None) -> None:
    """Write the traces under PATH as a parquet store (device/host/markers partitioned by rank and window)
    that every command reads in place of the traces, and pyarrow, pandas, DuckDB or polars read alone."""
    from traceattr import schema as S
    from traceattr.io.store import store_sources, write_store

    traceset, _ = load_traces(path, skip_bad=skip_bad, jobs=jobs, quiet=quiet, no_cache=no_cache,
                              scheduler=scheduler)
    paths = traceset.files.column(S.PATH).to_pylist()
    write_store(traceset, store, source=path, overwrite=force,
                sources=store_sources(paths) if all(os.path.exists(p) for p in paths) else [])
    click.echo(f"wrote {store}: {traceset.files.num_rows} files, ranks {traceset.ranks}, "
               f"{traceset.device.num_rows:,} device / {traceset.host.num_rows:,} host rows", err=True)


if __name__ == "__main__":   # python -m traceattr.cli
    sys.exit(main())
