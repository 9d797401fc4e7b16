"""Cached answers: a repeated `summarize` of unchanged traces prints what it printed before, in about 0.1 s.

The slow path computes a report and prints it; it then runs the same printing code once more with the
header a cached result shows (io/results.cached_header) and stores exactly what that printed (stdout and
stderr) as an `answers` entry of the cache folder, keyed by the finished-result key (inputs, request, code)
plus the format and the terminal width. The next identical request replays those bytes. So the answer is
the renderer's own output by construction, whatever the renderers become, and this module imports neither
pandas, pyarrow nor rich: a replay costs the interpreter, click, msgspec, listing and stat-ing the traces,
and reading one small file.

Hook (cli.summarize): `answer = CachedAnswer.find(...)`; `if answer and answer.replay(output): return`;
compute and print the report as usual; then `answer.record(print_again)`, where `print_again()` prints the
report with `cached_header(report.header)`. Everything the command prints must happen inside it.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

from traceattr.errors import TraceInputError
from traceattr.io.cachedir import CacheDir, CacheEntryError, file_key, hex_name
from traceattr.io.discover import discover
from traceattr.io.results import result_key, summary_request
from traceattr.report.output import write_output
from traceattr.report.printable import INVISIBLE

KIND = "answers"
def _foreign(text: str) -> bool:
    """Whether a stored answer holds a character the renderers always escape (control, zero-width, bidi;
    newlines aside): then it was not written by them and must not reach a terminal."""
    return INVISIBLE.search(text.replace("\n", "")) is not None


@dataclass
class CachedAnswer:
    cache: CacheDir
    name: str
    key: dict

    @classmethod
    def find(cls, path: str, *, by: str, top: int | None, skip_bad: bool, rank_map: dict | None, fmt: str,
             width: int, cache_dir: str | None = None, per_rank: bool = False,
             full_names: bool = False, multirank: dict | None = None,
             exclude_carried_in: bool = False, display: dict | None = None) -> CachedAnswer | None:
        """The answer slot of this request, or None when it cannot have one (no traces there; parquet output,
        which is binary)."""
        if fmt == "parquet":
            return None
        try:
            result = result_key(path, summary_request(by, top, skip_bad, rank_map, per_rank, multirank,
                                                         exclude_carried_in))
            beside = _capture_files(path)
        except Exception:      # noqa: BLE001 - whatever is wrong, the slow path says it properly
            return None
        key = {"result": result, "format": fmt, "width": width if fmt == "table" else 0,
               "full_names": full_names and fmt in ("table", "markdown"), "capture_files": beside,
               "display": display or {}}     # -v, --notes, --quiet: what the header shows
        return cls(CacheDir.at(cache_dir), hex_name(json.dumps(key, sort_keys=True)), key)

    def replay(self, output: str | None) -> bool:
        """Print the stored answer (or write it to `output`); False when there is none to print."""
        import click

        try:
            _, blobs = self.cache.read(KIND, self.name, self.key, ("stdout", "stderr"))
            stdout, stderr = (blobs.get(part, b"").decode("utf-8") for part in ("stdout", "stderr"))
            if _foreign(stdout) or _foreign(stderr):
                raise CacheEntryError("control characters in a stored answer")
            if output is not None:
                write_output(stdout, output)
        except (CacheEntryError, OSError, UnicodeDecodeError, TraceInputError):
            return False        # a failed write too: the slow path says what went wrong
        if output is None:
            click.echo(stdout, nl=False)
        click.echo(stderr, nl=False, err=True)
        return True

    def record(self, print_again) -> None:
        """Run `print_again()` with stdout and stderr captured, and store what it printed."""
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                print_again()
            parts = {name: _writer(text.getvalue()) for name, text in (("stdout", out), ("stderr", err))
                     if text.getvalue()}
            self.cache.write(KIND, self.name, self.key, {}, parts)
        except Exception:      # noqa: BLE001 - an answer that cannot be stored only costs speed next time
            pass


def _writer(text: str):
    return lambda target: Path(target).write_text(text, encoding="utf-8")


def _capture_files(path) -> list[dict]:
    """In a traceattr.capture folder, every file under it as it is now: the kernel summaries its manifests
    name answer kernel and category tables before the traces do (pipelines/summarize.py), so an answer holds
    only while they are unchanged too. [] elsewhere (the result key covers the traces and manifests).
    Hidden folders and cache folders (one may be put inside) change with every run: not inputs. From the
    one walk of the path (io.discover.Inputs.capture_files)."""
    return [file_key(file, stat) for file, stat in discover(path).capture_files()]
