"""The `traceattr` command. Each command is a few lines over the public API plus one renderer.

New commands (compare, convert, ...) go in this file as `@main.command()` functions, following `summarize`.
Any TraceError raised inside a command becomes one line on stderr and the error's exit code.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import sys

import click

from traceattr import __version__
from traceattr.allocator import return_freed_memory
from traceattr.errors import NoTracesError, TraceError, TraceFormatError, TraceInputError
from traceattr.io.cachedir import CacheDir
from traceattr.io.discover import discover
from traceattr.io.fastscan import decoder_name
from traceattr.io.gzipstream import MAX_EVENTS_ENV, MAX_INFLATE_ENV, InflateLimit
from traceattr.io.limits import MAX_EVENTS_DEFAULT, out_of_memory
from traceattr.io.rankmap import read_rank_map
from traceattr.io.results import cached_header, multirank_options
from traceattr.captures import GIVEN_CAPTURES
from traceattr.pipelines.answer import CachedAnswer
from traceattr.report.printable import clipped, printable, printable_lines
from traceattr.report.notes import MAX_NOTES, shown_header
from traceattr.units import counted, human_bytes

# Only light modules above: `traceattr --help`, `--version` and a repeated summarize answered from the cache
# import no pandas, pyarrow, numpy, rich or msgspec (tests/test_scale_cache.py). Each command reaches its heavy
# work through function-local imports, each marked `# lazy:` (docs/design.md, "The floors").

SUMMARY_LEVELS = ("kernel", "category", "rank", "collective")
ATTRIBUTION_LEVELS = ("op", "op_stack", "module", "module_class", "annotation", "step", "phase", "iteration", "shape",
                      "launch")
FORMATS = ("table", "csv", "json", "markdown", "parquet")   # == traceattr.report.render.FORMATS
RAW_CSV = "csv-raw"     # --format csv --csv-raw: == traceattr.report.render.RAW_CSV


class TraceattrGroup(click.Group):
    """Turns TraceError into `traceattr: error: <message>` and its exit code, without a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TraceError as exc:
            message = printable(str(exc).strip() + _capture_context(exc)) or type(exc).__name__   # one line
            click.echo(f"traceattr: error: {message}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:     # a bad option value (-o a folder): one line, as for bad input
            hint = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            click.echo(f"traceattr: error: {printable(exc.format_message())}{hint}", err=True)
            ctx.exit(exc.exit_code)
        except MemoryError:         # a command without a path (load_options names it where there is one)
            click.echo(f"traceattr: error: {out_of_memory('')}", err=True)
            ctx.exit(2)
        except KeyboardInterrupt:   # workers are already stopped by the loader; no traceback for Ctrl-C
            click.echo("traceattr: interrupted", err=True)
            # leave at once: interpreter shutdown joins the process pool's manager thread, which can wait
            # on a pipe to a worker the loader just terminated; every cache write is already atomic
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        except BrokenPipeError:   # `traceattr ... | head`: the reader left; exit quietly like other tools
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            ctx.exit(1)


def _capture_context(exc: TraceError) -> str:
    """For a path without traces: what a traceattr.capture run's manifests there say of them (the files
    they list that are missing, the windows that were lost), so "no trace files" comes with its cause."""
    if not isinstance(exc, NoTracesError) or not os.path.isdir(exc.path):
        return ""
    from traceattr.pipelines.capture_problems import capture_problems_at   # lazy: pandas; only an error needs it

    try:
        problems = capture_problems_at(exc.path)
    except Exception:  # noqa: BLE001 - manifests that cannot be read: the error being reported is the answer
        return ""
    if not problems:
        return _no_window(exc.path)
    shown = "; ".join(clipped(problem) for problem in problems[:3])
    more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
    return f" (the capture's manifests there: {shown}{more})"


def _no_window(path: str) -> str:
    """A capture that ended cleanly before its first window (fewer steps than wait + warmup + active) has
    no problem and no trace: "no trace files" alone left the user to guess why."""
    from traceattr.io.manifest import read_run   # lazy: the cached answer's path reads no manifest

    try:
        run = read_run(path)
    except Exception:  # noqa: BLE001 - no capture there, or manifests that cannot be read: nothing to add
        return ""
    if not run.manifests or run.windows:
        return ""
    return (" (a traceattr.capture run whose manifests list no window: it stopped before its first window "
            "became active; its schedule waits wait + warmup steps first)")


class _InputPath(click.Path):
    """A trace path argument, completed as a path but not stat'd by click (with every check off, its stat
    decided nothing): the command's one walk (io.discover) looks at it, and a trace gets two stats at most."""

    def convert(self, value, param, ctx):
        return value if isinstance(value, str) else super().convert(value, param, ctx)


PATH = _InputPath(path_type=str)


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"traceattr, version {__version__}\nevent decoder: {decoder_name()}")
    ctx.exit()


@click.group(cls=TraceattrGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version (and which event decoder runs) and exit.")
def main() -> None:
    """Exact device-time attribution for PyTorch profiler (Kineto) traces."""
    return_freed_memory()       # before pyarrow loads: a decoded file and the arrays after it do not stack up


def terminal_width() -> int:
    """The terminal's columns: tables fit them (report/render.py leaves out secondary columns to do so)."""
    return max(40, shutil.get_terminal_size((160, 24)).columns)


def emit(table, header: dict | None, fmt: str, output: str | None, title: str | None = None,
         tree_top: int | None = None, full_names: bool = False, stderr_header: dict | None = None) -> None:
    """Render a result table and print it (or write it to `output`). When the header is not on the
    terminal (a file, or a machine format), its notes go to stderr, one line each, so none is lost."""
    from traceattr.report.render import render   # lazy: imports pyarrow and rich

    width = terminal_width()
    text = render(table, fmt, header=header, output=output, title=title, width=width, tree_top=tree_top,
                  full_names=full_names)
    if text is not None:
        echo_data(text)
    if output is not None or fmt not in ("table", "markdown"):
        echo_notes(stderr_header if stderr_header is not None else header)


def echo_data(text: str) -> None:
    """Print a rendered table. csv and json keep names whole for a pipe or a file (color=True: click must
    not strip escape sequences out of the data), but on a terminal a kernel name's control characters
    would act on it: there each line is shown escaped, like the table format's names."""
    if sys.stdout.isatty():
        text = printable_lines(text)
    click.echo(text, nl=False, color=True)


# the header's judgements: like the notes, never lost when the table goes to a file or a machine format
VERDICT_FACTS = ("check", "clock alignment", "straggler", "busiest rank", "outlier step")


def echo_notes(header: dict | None, run: str | None = None) -> None:
    """The header's findings, judgements and notes on stderr, a line each. `run`: the run they are of, when
    the command reports several (its findings and judgements name it; the notes name their files)."""
    header = header or {}
    about = f"{run}: " if run else ""
    lines = [f"finding: {about}{line}" for line in header.get("findings", [])]
    lines += [f"{key}: {about}{header[key]}" for key in VERDICT_FACTS if header.get(key) not in (None, "", "ok")]
    lines += [f"note: {note}" for note in header.get("notes", [])]
    for line in lines:
        click.echo("traceattr: " + printable(clipped(" ".join(str(line).split()))), err=True)


def without_findings(header: dict | None) -> dict | None:
    """The header `--quiet` shows: no findings (analysis/findings.py)."""
    return None if header is None else {key: value for key, value in header.items() if key != "findings"}


def display_options(command):
    """-v/--verbose and --notes: how much of the header a command shows (report/notes.py)."""
    command = click.option("--notes", "all_notes", is_flag=True,
                           help=f"Show every note in the header (by default the first {MAX_NOTES}, then how many "
                                "more).")(command)
    return click.option("-v", "--verbose", is_flag=True,
                        help="Also show how the traces were read: timestamp eras (A/B/C, docs/kineto-format.md), "
                             "where each rank number came from, which rule found communication kernels, and "
                             "'host only: no'.")(command)


@dataclasses.dataclass(frozen=True)
class Display:
    """What the header shows (report/notes.py): the PATH argument (notes name files relative to it), -v,
    --notes and --quiet (no findings)."""
    path: object = None
    verbose: bool = False
    all_notes: bool = False
    quiet: bool = False

    def header(self, header: dict | None, limit: bool = True) -> dict | None:
        header = without_findings(header) if self.quiet else header
        return shown_header(header, self.path, verbose=self.verbose, all_notes=self.all_notes, limit=limit)

    def key(self) -> dict:
        return {"verbose": self.verbose, "all_notes": self.all_notes, "quiet": self.quiet}


def full_names_option(command):
    return click.option("--full-names", is_flag=True,
                        help="Show whole kernel/op names (folded) instead of short unique display names; "
                             "csv/json/parquet always hold the whole names.")(command)


def csv_raw_option(command):
    """--csv-raw: csv text cells exactly as the trace names them. By default a cell a spreadsheet would run as
    a formula (= + - @ tab CR first) gets a leading `'`; the command then sees fmt "csv-raw" (its own cached
    answer, its own renderer)."""
    @functools.wraps(command)
    def with_raw(*args, csv_raw: bool = False, **kwargs):
        if csv_raw:
            if kwargs.get("fmt") != "csv":
                raise TraceInputError("--csv-raw needs --format csv")
            kwargs["fmt"] = RAW_CSV
        return command(*args, **kwargs)
    return click.option("--csv-raw", is_flag=True,
                        help="With --format csv: text cells exactly as in the traces (by default a cell starting "
                             "with = + - @ tab or CR gets a leading ' so a spreadsheet shows it as text).")(with_raw)


def output_options(command, formats=FORMATS):
    """--format, -o/--output, --skip-bad, --csv-raw: shared by every command that prints a table."""
    command = csv_raw_option(command)
    command = click.option("--skip-bad", is_flag=True,
                           help="Skip unreadable trace files with a note instead of failing.")(command)
    command = click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
                           help="Write to this file instead of stdout (required for parquet).")(command)
    return click.option("--format", "fmt", type=click.Choice(formats), default="table",
                        show_default=True)(command)


def require_output_for_parquet(fmt: str, output: str | None) -> None:
    """Checked before any trace is read: parquet is binary and html a page; neither goes to the terminal."""
    if fmt in ("parquet", "html") and output is None:
        raise TraceInputError(f"--format {fmt} writes a file: give one with -o FILE")



def _rank_map(ctx, param, value):
    return read_rank_map(value) if value is not None else None


def cache_dir_option(command):
    return click.option("--cache-dir", metavar="DIR", default=None,
                        help="The cache folder (default: $TRACEATTR_CACHE_DIR, else $XDG_CACHE_HOME/traceattr, "
                             "else ~/.cache/traceattr); a shared one serves a team.")(command)


def load_options(command, graph_capture: bool = True):
    """--jobs, --quiet, --no-cache, --cache-dir, --scheduler, --rank-map, --max-inflate, --max-events: how the
    traces are decoded and ranked (traceattr.io.parallel/cachedir/rankmap/gzipstream); and --graph-capture
    where graph replays are attributed (`graph_capture`)."""
    command = _memory_errors_named(command)
    command = click.option("--rank-map", "rank_map", metavar="FILE", default=None, callback=_rank_map,
                           help="Ranks of files that carry none: name=rank lines or a JSON object "
                                "{name: rank} (name: the file's base name or path).")(command)
    command = click.option("--scheduler", metavar="ADDRESS", default=None,
                           help="Decode the files on this Dask scheduler (tcp://host:8786).")(command)
    command = cache_dir_option(command)
    command = click.option("--no-cache", is_flag=True,
                           help="Neither read nor write the cache (decoded files, finished tables).")(command)
    command = click.option("-q", "--quiet", is_flag=True,
                           help="No progress bar on stderr and no findings (notes and warnings still print)."
                           )(command)
    if graph_capture:
        command = click.option("--graph-capture", metavar="PATH", multiple=True, expose_value=False,
                               callback=_graph_capture,
                               help="A CUDA/HIP graph-capture trace (file or folder; repeatable) whose launches "
                                    "attribute the graph replays under PATH (docs/inference.md).")(command)
    command = click.option("--max-events", metavar="N", type=click.IntRange(min=1), default=None,
                           expose_value=False, callback=_max_events,
                           help=f"Refuse a trace file of more than N events (default {MAX_EVENTS_DEFAULT:,}; "
                                "memory grows by 100-300 bytes per event).")(command)
    command = click.option("--max-inflate", metavar="SIZE[,RATIO:1]", default=None, expose_value=False,
                           callback=_max_inflate, help="Refuse a gzip trace that inflates beyond SIZE or RATIO "
                           "times its size (default 64GiB,1000:1).")(command)
    return click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
                        help="Files decoded at once (default: the available cores).")(command)


def _memory_errors_named(command):
    """A MemoryError the command meets outside a file's own decode and map (which name the file: a reduce, a
    render) becomes one line naming the path it reads, exit 2."""
    @functools.wraps(command)
    def named(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except MemoryError:
            pass        # left here, so the arrays its traceback holds are freed before the line is printed
        paths = " and ".join(str(kwargs[name]) for name in ("path", "path_a", "path_b") if name in kwargs)
        raise TraceFormatError(paths or "traceattr", out_of_memory("while reading the traces"))
    return named


def _max_events(ctx: click.Context, param: click.Parameter, value: int | None) -> None:
    """--max-events goes to the environment, like --max-inflate: decoding here or in workers reads it there."""
    if value is not None:
        os.environ[MAX_EVENTS_ENV] = str(value)


def _graph_capture(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> None:
    """--graph-capture holds for this command (set on every run, so an in-process run never keeps the last's)."""
    GIVEN_CAPTURES.set(tuple(value))


def _max_inflate(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Check --max-inflate now; decoding (here or in worker processes) reads it from the environment."""
    if value is not None:
        try:
            InflateLimit.from_text(value)
        except TraceError as exc:
            raise click.BadParameter(str(exc)) from None
        os.environ[MAX_INFLATE_ENV] = value


SUMMARIZE_HELP = """Where the device time of the traces under PATH went: exact self time that adds up to busy time.

\b
Columns:
  duration  the activities' summed durations (counts time shared with other streams several times)
  self      each activity's fair share: an interval run by k activities gives each 1/k (sums to busy)
  solo      the time the activity ran with nothing else on its device (no overlap to hide it)
  exposed   (--by category) the time the category ran with no other category on its device

\b
Levels: kernel, category and rank need only the device rows; op, op_stack, annotation and step need the
cpu ops that launched the kernels (any profile of CPU and CUDA activity); module needs the python frames of
a trace captured with with_stack=True; shape needs record_shapes=True: one row per (op, input dims, types)
with FLOPs, bytes, TFLOP/s, TB/s and the share of the device's roof (docs/roofline.md); launch: per
(rank, device, stream, op) the host launch time, the launch-to-start delay (p50, p99) and the short kernels. With several ranks, every level but rank shows one row per key over
all ranks (total, mean per rank, the least and the most busy rank); --per-rank keeps one row per rank.

\b
The header:
  finding   the largest issues first (at most 5; --quiet leaves them out), each with the option that shows more
  source    decoded traces, the cache, or a capture's summaries     check     traceattr check's verdict
  windows total  Σ of each file's first-to-last event span          busy      time any device activity ran
  idle      windows total - busy, per (rank, device)                Σ durations  what summing kernels gives
  overlap saved  Σ durations - busy (time activities ran at once)   note      what to know (--notes: all)
  exposed communication  communication running with no compute; overlap ratio: the share compute hid
  -v adds: eras (timestamp kinds A/B/C), rank sources, communication by rule (docs/collectives.md)
"""


@main.command(help=SUMMARIZE_HELP)
@click.argument("path", type=PATH)
@click.option("--by", type=click.Choice(SUMMARY_LEVELS + ATTRIBUTION_LEVELS + ("critical",)), default="kernel",
              show_default=True, help="What each row is.")
@click.option("--top", type=click.IntRange(min=1), default=None,
              help="Largest N rows (per rank and device with --per-rank); the rest is summed into one "
                   "<other> row. With --by iteration: each rank's N longest iterations (wall time), in start "
                   "order, the rest summed into one <other iterations> row (the header says how many).")
@click.option("--per-rank", is_flag=True, help="One row per (rank, device, key) instead of one per key "
              "over all ranks.")
@full_names_option
@output_options
@click.option("--tree", is_flag=True, help="With --by op_stack|module|annotation: the path tree with inclusive "
              "and exclusive self time (--top N children per level).")
@click.option("--links", "show_links", is_flag=True,
              help="Show the link report (kernel -> launch -> op) instead of a table.")
@click.option("--comm-pattern", "comm_patterns", multiple=True, metavar="REGEX",
              help="Kernels whose name matches REGEX are communication too (repeatable; docs/collectives.md).")
@click.option("--no-align", is_flag=True, help="Do not align rank clocks on collective ends (--by rank|collective).")
@click.option("--aggregate", is_flag=True, help="With --by collective: one row per (kind, group, size).")
@click.option("--exclude-carried-in", is_flag=True, help="Leave out device activities launched before the "
              "profiler started (the header's `carried in`) from every total: busy, self, tables (as TraceLens "
              "does; docs/inference.md).")
@click.option("--step-annotation", default=None, metavar="NAME",
              help="With --by critical: the annotation whose instances are the steps (default: ProfilerStep#N, "
                   "else the whole window).")
@click.option("--across-ranks", is_flag=True,
              help="With --by critical: follow each step's path across ranks through matched collectives "
                   "(one row per kind, key and rank; the header names each step's chain of ranks).")
@click.option("--what-if", "what_if", multiple=True, metavar="KEY=FACTOR",
              help="With --by critical: re-solve each step with the kernel or op KEY taking FACTOR times as long "
                   "(repeatable; e.g. 'aten::mm=0.5'); the header gives the new step time.")
@click.option("--peak-tflops", type=float, default=None, metavar="TFLOPS",
              help="With --by shape: the device's peak TFLOP/s for every dtype, instead of the known device's "
                   "(docs/roofline.md).")
@click.option("--peak-tbps", type=float, default=None, metavar="TBPS",
              help="With --by shape: the device's memory bandwidth in TB/s, instead of the known device's.")
@display_options
@load_options
def summarize(path: str, by: str, top: int | None, per_rank: bool, full_names: bool, fmt: str,
              output: str | None, skip_bad: bool, tree: bool, show_links: bool, comm_patterns: tuple[str, ...],
              no_align: bool, aggregate: bool, exclude_carried_in: bool, step_annotation: str | None,
              across_ranks: bool, what_if: tuple[str, ...], peak_tflops: float | None, peak_tbps: float | None,
              verbose: bool, all_notes: bool, jobs: int | None, quiet: bool, no_cache: bool, cache_dir: str | None,
              scheduler: str | None, rank_map: dict | None) -> None:
    require_output_for_parquet(fmt, output)
    display = Display(path, verbose, all_notes, quiet)
    inputs = discover(path)      # the one walk: the cached answer's key, the capture summaries, the plan, the notes
    answer = None if no_cache or tree or show_links or by == "critical" or GIVEN_CAPTURES.get() else CachedAnswer.find(
        inputs, by=by, top=top, skip_bad=skip_bad, rank_map=rank_map, fmt=fmt, width=terminal_width(),
        cache_dir=cache_dir, per_rank=per_rank, full_names=full_names,
        multirank=multirank_options(comm_patterns, not no_align, aggregate, (peak_tflops, peak_tbps)),
        exclude_carried_in=exclude_carried_in,
        display=display.key())
    if answer is not None and answer.replay(output):
        return

    from traceattr.pipelines.summarize import summary_report   # lazy: pandas, only when not answered above
    from traceattr.report.summarize import render_report   # lazy: as above

    def show(report, output):
        shown = dataclasses.replace(report, header=display.header(report.header), runs=tuple(
            (name, dataclasses.replace(part, header=display.header(part.header))) for name, part in report.runs))
        text = render_report(shown, fmt, output, width=terminal_width(), full_names=full_names)
        if text is not None:     # several runs under PATH: one header and table per run, never merged
            echo_data(text)
        if output is not None or fmt not in ("table", "markdown"):   # the header is not on the terminal
            for name, header in [(None, report.header)] + [(name, part.header) for name, part in report.runs]:
                echo_notes(display.header(header, limit=False), name)

    report = summary_report(inputs, by=by, top=top, tree=tree, links=show_links, skip_bad=skip_bad, jobs=jobs,
                            progress=not quiet, cache=not no_cache, scheduler=scheduler, rank_map=rank_map,
                            cache_dir=cache_dir, per_rank=per_rank, comm_patterns=comm_patterns,
                            align=not no_align, aggregate=aggregate, exclude_carried_in=exclude_carried_in,
                            step_annotation=step_annotation, critical_across=across_ranks, what_if=what_if,
                            peak_tflops=peak_tflops, peak_tbps=peak_tbps)
    show(report, output)
    if answer is not None:     # what a cached answer prints: the same, from the cache
        answer.record(lambda: show(dataclasses.replace(report, header=cached_header(report.header), runs=tuple(
            (name, dataclasses.replace(part, header=cached_header(part.header))) for name, part in report.runs)),
            None))


COMPARE_LEVELS = ("kernel", "category", "op", "op_stack", "module", "module_class", "annotation", "step", "shape",
                  "critical")


@main.command()
@click.argument("path_a", type=PATH)
@click.argument("path_b", type=PATH)
@click.option("--by", type=click.Choice(COMPARE_LEVELS), default="kernel", show_default=True,
              help="What each row is (critical: the steps' critical paths per kind and key, "
                   "docs/critical-path.md).")
@click.option("--top", type=click.IntRange(min=1), default=None,
              help="Largest N rows by |delta|; the rest is summed into one <other> row (display only: "
                   "--fail-on-regression judges every key).")
@lambda command: output_options(command, FORMATS + ("html",))
@click.option("--no-normalize", is_flag=True, help="Join on raw names (no template/hash/arch reduction).")
@full_names_option
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Significance level of the per-step noise test.")
@display_options
@click.option("--fail-on-regression", "fail_pct", type=click.FloatRange(min=0), default=None, metavar="PCT",
              help="Exit 1 when the total or a key is slower by more than PCT percent beyond noise (or "
                   "untested: no noise estimate), or an added key costs more than PCT percent of A's busy "
                   "time (docs/compare.md).")
@load_options
def compare(path_a: str, path_b: str, by: str, top: int | None, fmt: str, output: str | None,
            skip_bad: bool, no_normalize: bool, full_names: bool, alpha: float, verbose: bool, all_notes: bool,
            fail_pct: float | None, jobs: int | None, quiet: bool, no_cache: bool, cache_dir: str | None,
            scheduler: str | None, rank_map: dict | None) -> None:
    """What changed from run A to run B: exact self time per key, deltas that add up, noise-aware status.

    Exit status: 0 (no regression, or no --fail-on-regression), 1 (a regression: see --fail-on-regression),
    2 (bad input, or --fail-on-regression with device time on neither side).
    """
    require_output_for_parquet(fmt, output)
    if fmt == "html":
        from traceattr.report.plots import require_matplotlib   # lazy: imports numpy
        require_matplotlib("compare --format html")
    if by == "critical":
        if fail_pct is not None:
            raise TraceInputError("--fail-on-regression judges self time per key: use it with another --by")
        compare_critical(path_a, path_b, top, fmt, output, no_normalize, full_names,
                         Display(None, verbose, all_notes, quiet), skip_bad=skip_bad, jobs=jobs, progress=not quiet,
                         cache=cache_dir if not no_cache and cache_dir else not no_cache, rank_map=rank_map)
        return
    from traceattr.analysis.compare import fold, regressions   # lazy: imports pandas and the engine
    from traceattr.analysis.compare_plan import compare_path_runs   # lazy: imports pandas and the engine
    from traceattr.report.compare import compare_header, for_format, runs_table   # lazy: imports pandas

    # each side by per-file map-reduce (a store is loaded): the traces of neither run are held at once; two
    # paths of several runs each give one comparison per pair of runs (docs/compare.md)
    pairs = compare_path_runs(path_a, path_b, by=by, normalize=not no_normalize, alpha=alpha, check_lines=True,
                              skip_bad=skip_bad, jobs=jobs, progress=not quiet, cache=not no_cache,
                              scheduler=scheduler, rank_map=rank_map, cache_dir=cache_dir)
    if len(pairs) > 1 and fmt == "html":
        raise click.UsageError(f"{len(pairs)} pairs of runs: --format html compares one run per side (give "
                               "each run's folder or file, or another --format)")
    display = Display(None, verbose, all_notes, quiet)
    shown = []
    for name, whole in pairs:
        table = fold(whole, top)        # --top shortens what is shown; the gate below judges every key
        header = compare_header(table, path_a, path_b)
        header["check"] = table.attrs["check"]
        if quiet:         # the page reads findings from the table's attrs too
            table.attrs.pop("findings", None)
        if name != ".":
            header["run"] = f"{name} ({[n for n, _ in pairs].index(name) + 1} of {len(pairs)} pairs)"
        shown.append((name, table, header))
    if fmt == "html":
        from traceattr.report.html import compare_report   # lazy: imports pandas
        from traceattr.report.render import write_text   # lazy: imports pyarrow and rich
        write_text(compare_report(table, display.header(header), by), output)
        echo_notes(display.header(header, limit=False))
    elif len(shown) == 1:
        emit(for_format(table, fmt), display.header(header), fmt, output, title=f"compare by {by}",
             full_names=full_names, stderr_header=display.header(header, limit=False))
    elif output is None and fmt in ("table", "markdown"):     # one header and table per pair, never summed
        for name, table, header in shown:
            emit(for_format(table, fmt), display.header(header), fmt, None, title=f"compare by {by} · run {name}",
                 full_names=full_names)
    else:       # a file or a machine format: one table, a `run` column first
        header = {"A": path_a, "B": path_b, "runs": f"{len(shown)} pairs",
                  "check": "; ".join(f"{name}: {header['check']}" for name, _, header in shown),
                  "notes": [f"{name}: {note}" for name, _, header in shown for note in header["notes"]]}
        emit(runs_table([(name, for_format(table, fmt)) for name, table, _ in shown]), display.header(header),
             fmt, output, title=f"compare by {by}", full_names=full_names,
             stderr_header=display.header(header, limit=False))
    if fail_pct is not None and not any(w.attrs["device_rows_a"] or w.attrs["device_rows_b"] for _, w in pairs):
        click.echo("traceattr: error: --fail-on-regression cannot judge: neither run has device activities "
                   "(compare measures device time)", err=True)
        sys.exit(2)
    if fail_pct is not None:
        failed = False
        for name, whole in pairs:
            slower = regressions(whole, fail_pct)
            if len(slower):
                where = f"run {name}: " if name != "." else ""
                click.echo(f"traceattr: {where}{regression_line(slower, fail_pct)}", err=True)
                failed = True
        if failed:
            sys.exit(1)


def compare_critical(path_a: str, path_b: str, top: int | None, fmt: str, output: str | None, no_normalize: bool,
                     full_names: bool, display: Display, **load_options) -> None:
    """compare --by critical: A's critical paths against B's per (kind, key) (analysis/compare_critical.py)."""
    from traceattr.analysis.compare_critical import compare_critical_paths, critical_header   # lazy: the engine

    table = compare_critical_paths(path_a, path_b, normalize=not no_normalize, top=top, **load_options)
    header = critical_header(table, path_a, path_b)
    if fmt == "html":
        from traceattr.report.html import compare_critical_report   # lazy: imports pandas
        from traceattr.report.render import write_text   # lazy: imports pyarrow and rich
        write_text(compare_critical_report(table, display.header(header)), output)
        echo_notes(display.header(header, limit=False))
        return
    emit(table, display.header(header), fmt, output, title="compare by critical path", full_names=full_names,
         stderr_header=display.header(header, limit=False))


def regression_line(slower, pct: float) -> str:
    """The gate's line: the keys it fails on, each saying why when it is not a change beyond noise (a row
    without a noise estimate is judged slower, not shown to be beyond noise)."""
    from traceattr.analysis.compare import ADDED, CHANGED, KEY, STATUS, UNTESTED   # lazy: imports pandas

    why = {CHANGED: "", UNTESTED: " (untested: no noise estimate)", ADDED: " (added)"}
    rows = list(zip(slower[KEY].tolist(), slower[STATUS].tolist()))
    names = printable(", ".join(f"{key}{why.get(status, '')}" for key, status in rows[:5]))
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    beyond = " beyond noise" if all(status == CHANGED for _, status in rows) else ""
    return f"regression{beyond} (> {pct:g}%): {names}{more}"


@main.command()
@click.argument("path", type=PATH)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), required=True,
              help="The HTML file to write (one self-contained page; opens offline).")
@click.option("--skip-bad", is_flag=True, help="Skip unreadable trace files with a note instead of failing.")
@click.option("--peak-tflops", type=float, default=None, metavar="TFLOPS",
              help="The roofline's peak TFLOP/s for every dtype, instead of the known device's (docs/roofline.md).")
@click.option("--peak-tbps", type=float, default=None, metavar="TBPS",
              help="The roofline's memory bandwidth in TB/s, instead of the known device's.")
@display_options
@load_options
def report(path: str, output: str, skip_bad: bool, peak_tflops: float | None, peak_tbps: float | None,
           verbose: bool, all_notes: bool, jobs: int | None, quiet: bool, no_cache: bool, cache_dir: str | None,
           scheduler: str | None, rank_map: dict | None) -> None:
    """An HTML report of the traces under PATH: header and verdicts, utilisation over time, top kernels,
    ops and modules, category split and busy time per rank and step. A folder of several runs gives one
    page: an index of the runs, then each run's own report, never merged."""
    from traceattr.analysis.roofline import PeakOverride, check_peaks   # lazy: imports pandas
    check_peaks("shape", peak_tflops, peak_tbps)       # the report's roofline is the shape level's: checked first
    from traceattr.report.plots import require_matplotlib   # lazy: imports numpy
    require_matplotlib("traceattr report")
    from traceattr.analysis.page_plan import page_data_runs   # lazy: imports pandas and the engine
    from traceattr.report.html import runs_page, trace_page   # lazy: imports pandas
    from traceattr.report.render import write_text   # lazy: imports pyarrow and rich
    from traceattr.pipelines.capture_problems import capture_problems_by_run   # lazy: imports pandas

    # by per-file map-reduce (a store is loaded): the traces are never held at once
    inputs = discover(path)      # the one walk: the plan and the capture problems read it
    runs, source = page_data_runs(inputs, skip_bad=skip_bad, jobs=jobs, progress=not quiet, cache=not no_cache,
                                  scheduler=scheduler, rank_map=rank_map, cache_dir=cache_dir,
                                  peaks=PeakOverride(peak_tflops, peak_tbps))
    display = Display(path, verbose, all_notes, quiet)
    if quiet:
        runs = [(name, dataclasses.replace(data, findings=[])) for name, data in runs]
    problems = capture_problems_by_run(inputs, [name for name, _ in runs])
    label = os.path.basename(os.path.normpath(path)) or path
    if len(runs) == 1:
        text, header = trace_page(runs[0][1], source, label, problems[runs[0][0]], shown=display.header)
        headers = [header]
    else:       # several runs under PATH: each its own report on one page, never merged
        text, headers = runs_page(runs, source, label, problems, path, shown=display.header)
    write_text(text, output)
    for (name, _), header in zip(runs, headers):
        echo_notes(display.header(header, limit=False), name if len(runs) > 1 else None)
    click.echo(f"wrote {printable(output)}", err=True)


@main.command()
@click.argument("path", type=PATH)
@click.option("-o", "--output", "store", type=click.Path(path_type=str), required=True,
              help="The store folder to write (a parquet dataset; see docs/scale.md).")
@click.option("--force", is_flag=True, help="Replace an existing store.")
@click.option("--skip-bad", is_flag=True, help="Skip unreadable trace files with a note instead of failing.")
@load_options         # --graph-capture: the store keeps the catalog of the captures, never them as windows
def convert(path: str, store: str, force: bool, skip_bad: bool, jobs: int | None, quiet: bool, no_cache: bool,
            cache_dir: str | None, scheduler: str | None, rank_map: dict | None) -> None:
    """Write the traces under PATH as a parquet store (device/host/markers partitioned by rank and window)
    that every command reads in place of the traces, and pyarrow, pandas, DuckDB or polars read alone."""
    from traceattr import schema as S   # lazy: imports pyarrow
    from traceattr.io.store import is_store, store_capture_problems, store_sources, write_store   # lazy: pyarrow
    from traceattr.io.sources import open_traces   # lazy: imports pandas and the engine

    if not is_store(path):      # trace files: the workers write the partitions (traceattr.engine.convert)
        from traceattr.analysis.graph_capture import graph_captures   # lazy: imports the analysis
        from traceattr.engine.convert import convert_traces   # lazy: imports the engine
        files, rows = convert_traces(path, store, jobs=jobs, scheduler=scheduler, skip_bad=skip_bad,
                                     cache=not no_cache, cache_dir=cache_dir, rank_map=rank_map,
                                     progress=not quiet, overwrite=force, graph_captures=graph_captures)
        ranks, device_rows, host_rows = sorted(set(files.column(S.RANK).to_pylist())), rows["device"], rows["host"]
    else:
        traceset, _ = open_traces(path, skip_bad=skip_bad, jobs=jobs, progress=not quiet, cache=not no_cache,
                                  scheduler=scheduler, rank_map=rank_map, cache_dir=cache_dir)
        paths = traceset.files.column(S.PATH).to_pylist()
        write_store(traceset, store, source=path, overwrite=force,
                    sources=store_sources(paths) if all(os.path.exists(p) for p in paths) else [],
                    capture_problems=store_capture_problems(path))
        files, ranks = traceset.files, traceset.ranks
        device_rows, host_rows = traceset.device.num_rows, traceset.host.num_rows
    click.echo(f"wrote {printable(store)}: {counted(files.num_rows, 'file')}, ranks {ranks}, "
               f"{device_rows:,} device / {host_rows:,} host rows", err=True)


@main.command("check")
@click.argument("path", type=PATH)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Write to this file instead of stdout (required for parquet).")
@click.option("--clip-outliers", "clip", is_flag=True,
              help="Also show busy and idle time with outlier activities clipped, side by side.")
@csv_raw_option
@load_options
def check_command(path: str, fmt: str, output: str | None, clip: bool, jobs: int | None, quiet: bool,
                  no_cache: bool, cache_dir: str | None, scheduler: str | None, rank_map: dict | None) -> None:
    """Can the numbers of the traces under PATH be trusted? Per file and overall: ok, warn or bad.

    Exit status: 0 ok, 1 warn, 2 bad (or unusable input). Unreadable files are findings, not errors.
    """
    require_output_for_parquet(fmt, output)
    from traceattr.analysis.check import VERDICTS   # lazy: imports pandas
    from traceattr.pipelines.check import check_runs   # lazy: imports pandas and the engine
    from traceattr.report.check import render_check   # lazy: imports pandas

    results, verdict = check_runs(path, clip=clip, jobs=jobs, progress=not quiet, cache=not no_cache,
                                  scheduler=scheduler, rank_map=rank_map, cache_dir=cache_dir)
    text = render_check(results, verdict, path, fmt, output, width=terminal_width())
    if text is not None:
        echo_data(text)
    sys.exit(VERDICTS.index(verdict))     # ok 0, warn 1, bad 2


@main.group()
def cache() -> None:
    """The cache of decoded traces and finished tables (see docs/scale.md)."""


@cache.command("info")
@cache_dir_option
def cache_info(cache_dir: str | None) -> None:
    """Where the cache is, how big, and its cap ($TRACEATTR_CACHE_MAX)."""
    folder = CacheDir.at(cache_dir)
    usage = folder.usage()
    entries = ", ".join(f"{count} {kind}" for kind, count in usage.entries.items())
    click.echo(f"cache: {folder.root}\nsize: {human_bytes(usage.bytes)} of {human_bytes(folder.max_bytes)} "
               f"(least recently used entries go first)\nentries: {entries}\n"
               f"stale temporary files: {usage.stale_temporary}")


@cache.command("clear")
@cache_dir_option
def cache_clear(cache_dir: str | None) -> None:
    """Remove every cache entry (only files the cache wrote). Exit 2 when some could not be removed."""
    folder = CacheDir.at(cache_dir)
    cleared = folder.clear()
    click.echo(f"removed {counted(cleared.entries, 'entry', 'entries')} ({human_bytes(cleared.bytes)}) "
               f"from {printable(str(folder.root))}")
    if cleared.failed:
        # a team cache owned by others, a read-only mount: saying "removed" and exiting 0 was a lie
        click.echo(f"traceattr: error: {counted(cleared.failed, 'file')} could not be removed from "
                   f"{printable(str(folder.root))} ({cleared.reason})", err=True)
        sys.exit(2)


if __name__ == "__main__":   # python -m traceattr.cli
    sys.exit(main())
