"""CaptureConfig: every capture setting in one flat, frozen dataclass, validated before anything starts."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import string
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from traceattr.errors import CaptureConfigError
from traceattr.io.limits import MAX_RANK

# names accepted in `activities` -> torch.profiler.ProfilerActivity member names
ACTIVITY_NAMES = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mtia": "MTIA", "hpu": "HPU",
                  "privateuse1": "PrivateUse1"}
AUTO = "auto"   # cpu plus every accelerator this torch build can record
ALL = "all"

_COUNT_FIELDS = ("skip_first", "wait", "warmup", "active", "repeat", "max_windows",
                 "memory_snapshot_max_entries")
# The most each count may be, and why: `active=10**30` was accepted and recorded until stop(), holding every
# event in memory. Far beyond any real run, well inside what torch and the manifest can hold.
STEPS_MAX = 10**9          # skip_first, wait: more global steps than any run takes
WINDOW_STEPS_MAX = 100_000  # warmup, active: the profiler holds every event of a window's steps in memory
WINDOWS_MAX = 1_000        # repeat, max_windows: the manifest, rewritten per window, lists each (readers take 1 MiB)
FLUSH_TIMEOUT_MAX_S = 86_400.0     # stop() waits at most a day for pending writes
_COUNT_LIMITS = {
    "skip_first": (0, STEPS_MAX, "more steps than any run takes"),
    "wait": (0, STEPS_MAX, "more steps than any run takes"),
    "warmup": (0, WINDOW_STEPS_MAX, "the profiler holds every event of a window's steps in memory"),
    "active": (1, WINDOW_STEPS_MAX, "the profiler holds every event of a window's steps in memory"),
    "repeat": (0, WINDOWS_MAX, "the manifest, rewritten once per window, lists every window"),
    "max_windows": (1, WINDOWS_MAX, "the manifest, rewritten once per window, lists every window"),
    "memory_snapshot_max_entries": (1, 10**7, "torch keeps every entry, with its stack, in memory"),
}
_FLAG_FIELDS = ("enabled", "record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules",
                "compress", "kernel_summary", "memory_snapshot", "barrier_on_stop", "overwrite")


@dataclass(frozen=True)
class CaptureConfig:
    """What to profile, when, and how. Steps are counted from 0 at `start()`, one `step()` per global step.

    The n-th window (n = 0, 1, ...) records steps `skip_first + n*(wait+warmup+active) + wait + warmup` to
    `... + active - 1`; `repeat=0` repeats windows until `stop()`, bounded by `max_windows` (disk bound).
    """

    out_dir: str | None = None
    enabled: bool = True
    ranks: Any = 0                      # "all", an int, or a list of ints; rank 0 only by default
    skip_first: int = 0
    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1                     # 0: until stop(), at most max_windows windows
    max_windows: int = 100
    activities: Any = AUTO              # "auto" or names: cpu, cuda, xpu, mtia, hpu, privateuse1
    record_shapes: bool = False         # off by default: it keeps tensors alive until the window ends
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    compress: bool = True               # window{W}.pt.trace.json.gz, gzip done off the training thread
    kernel_summary: bool = True         # window{W}.kernels.parquet from the exact attribution
    memory_snapshot: bool = False       # CUDA allocator history during each window, dumped at its end
    memory_snapshot_max_entries: int = 100_000
    flush_timeout_s: float = 60.0       # stop() waits at most this long for pending writes
    barrier_on_stop: bool = False       # stop() ends with a torch.distributed barrier (every rank calls stop)
    overwrite: bool = False             # replace the previous capture in a rank folder (atomically)
    run_name: str | None = None         # e.g. "{time}-{config_hash}": a fresh folder under out_dir per run
    on_error: str = "warn"              # start() failing (out_dir unwritable, ...): "warn" and train on, or "raise"

    @classmethod
    def from_dict(cls, data: Mapping) -> "CaptureConfig":
        """Build from any mapping (a dict, OmegaConf DictConfig, mappingproxy); unknown keys are config errors."""
        if not isinstance(data, Mapping) and not _is_mapping_like(data):
            raise CaptureConfigError([f"config: expected a mapping, got {type(data).__name__}"])
        values = {str(key): _plain(data[key]) for key in data.keys()}
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        for key in ("ranks", "activities"):   # YAML lists -> tuples, so the frozen config stays hashable
            if isinstance(values.get(key), list):
                values[key] = tuple(values[key])
        if unknown:     # and what else is wrong: one error names every bad field, as validate() does
            problems = [_unknown_field(key, known) for key in unknown]
            try:
                cls(**{key: value for key, value in values.items() if key in known}).validate(probe_out_dir=False)
            except CaptureConfigError as exc:
                problems += exc.problems
            except TypeError:
                pass        # out_dir missing: its own error once the unknown field is fixed
            raise CaptureConfigError(problems, hint=f"known fields: {', '.join(known)}")
        return cls(**values)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        for key in ("ranks", "activities"):
            if isinstance(out[key], tuple):
                out[key] = list(out[key])
        return out

    def content_hash(self) -> str:
        """SHA-256 of the config content (not of a path), recorded in every manifest."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def cycle(self) -> int:
        return self.wait + self.warmup + self.active

    def resolve_run_name(self, now_s: float | None = None) -> "CaptureConfig":
        """This config with `run_name`'s template filled in and joined to out_dir (run_name becomes None).
        A driver that starts workers without torch.distributed calls this once so every rank agrees."""
        if not self.run_name:
            return self
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now_s is None else now_s))
        name = self.run_name.format(time=stamp, config_hash=self.content_hash())
        return dataclasses.replace(self, out_dir=str(Path(self.out_dir).expanduser() / name), run_name=None)

    def check_out_dir(self) -> None:
        """Create out_dir and prove it writable (only on a rank that will write); CaptureConfigError if not."""
        problems = self.out_dir_problems()
        if problems:
            raise CaptureConfigError(problems)

    def out_dir_problems(self) -> list[str]:
        """Create out_dir and prove it writable; what is wrong, or [] (the profiler's start() turns it into
        profiling off with a warning: a full or read-only disk is no reason to end the training job)."""
        return _probe_out_dir(self.out_dir)

    def validate(self, probe_out_dir: bool = True) -> "CaptureConfig":
        """Raise one CaptureConfigError naming every bad field; return self when all is well.
        `probe_out_dir=False` checks the path without touching the disk (the profiler probes it later, and
        only on the ranks it selects)."""
        problems = _check_flags(self)
        if self.enabled is not True:
            if problems:
                raise CaptureConfigError(problems)
            return self      # a disabled config does nothing, so nothing else matters
        problems += _check_counts(self)
        problems += _check_ranks(self.ranks)
        problems += _check_activities(self.activities)
        problems += _check_out_dir(self.out_dir)
        problems += _check_run_name(self.run_name)
        problems += _check_on_error(self.on_error)
        if probe_out_dir and not problems:
            problems += _probe_out_dir(self.out_dir)
        problems += _check_flush_timeout(self.flush_timeout_s)
        if self.memory_snapshot is True and not _cuda_available():
            problems.append("memory_snapshot: needs CUDA, which this torch build or machine does not have")
        if problems:
            raise CaptureConfigError(problems)
        return self


ON_ERROR = ("warn", "raise")


def _check_on_error(value: Any) -> list[str]:
    if isinstance(value, str) and value in ON_ERROR:
        return []
    return [f"on_error: must be one of {', '.join(map(repr, ON_ERROR))} (got {_shown(value)})"]


def _check_flags(cfg: CaptureConfig) -> list[str]:
    return [f"{name}: must be true or false (got {getattr(cfg, name)!r})"
            for name in _FLAG_FIELDS if not isinstance(getattr(cfg, name), bool)]


def _check_counts(cfg: CaptureConfig) -> list[str]:
    problems = []
    for name in _COUNT_FIELDS:
        value = getattr(cfg, name)
        minimum, maximum, why = _COUNT_LIMITS[name]
        if value is None:
            problems.append(f"{name}: must be set (got None)")
        elif isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{name}: must be an integer (got {_shown(value)})")
        elif value < minimum:
            problems.append(f"{name}: must be >= {minimum} (got {_shown(value)})")
        elif value > maximum:
            problems.append(f"{name}: must be at most {maximum:_} (got {_shown(value)}): {why}")
    return problems


def _check_flush_timeout(value: Any) -> list[str]:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        return [f"flush_timeout_s: must be a number > 0 (got {_shown(value)})"]
    if not value <= FLUSH_TIMEOUT_MAX_S:        # inf too: stop() would wait for ever, stalling training
        return [f"flush_timeout_s: must be at most {FLUSH_TIMEOUT_MAX_S:_.0f} seconds (got {_shown(value)}): "
                "stop() waits that long for pending writes"]
    return []


def _shown(value: Any) -> str:
    """A value for a message: a huge integer by its size (str() of one past 4300 digits raises)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 64:
        return f"an integer of about {int(abs(value).bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_ranks(ranks: Any) -> list[str]:
    if ranks is None:
        return ["ranks: must be set: 'all', a rank number or a list of ranks (got None)"]
    if ranks == ALL:
        return []
    if isinstance(ranks, str):
        return [f"ranks: a string must be 'all' (got {ranks!r})"]
    items = [ranks] if isinstance(ranks, int) and not isinstance(ranks, bool) else ranks
    if not isinstance(items, (list, tuple, set, frozenset)):
        return [f"ranks: must be 'all', an int or a list of ints (got {ranks!r})"]
    if len(items) == 0:
        return ["ranks: an empty list selects no rank; use enabled=False to capture nothing"]
    bad = [r for r in items if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= MAX_RANK]
    if bad:
        shown = ", ".join(_shown(r) for r in bad[:5]) + (", ..." if len(bad) > 5 else "")
        return [f"ranks: every rank must be an integer >= 0 and <= {MAX_RANK:_} (bad: [{shown}])"]
    return []


def _check_activities(activities: Any) -> list[str]:
    if activities is None:
        return ["activities: must be set: 'auto' or a list of names (got None)"]
    if activities == AUTO:
        return []
    names = [activities] if isinstance(activities, str) else activities
    if not isinstance(names, (list, tuple)) or not names:
        return [f"activities: must be 'auto' or a non-empty list of names (got {activities!r})"]
    unknown = [n for n in names if not isinstance(n, str) or n.lower() not in ACTIVITY_NAMES]
    if unknown:
        return [f"activities: unknown name(s) {unknown!r}; known: {', '.join(ACTIVITY_NAMES)}"]
    supported = supported_activity_names()
    missing = [n for n in names if n.lower() not in supported]
    if missing:
        return [f"activities: this torch build cannot record {missing!r} (it can record {sorted(supported)})"]
    return []


def _check_out_dir(out_dir: Any) -> list[str]:
    if out_dir is None or out_dir == "":
        return ["out_dir: must be set to a folder path (got None)"]
    if not isinstance(out_dir, (str, os.PathLike)):
        return [f"out_dir: must be a path (got {out_dir!r})"]
    if "\0" in str(out_dir):
        return [f"out_dir: a path cannot hold a NUL character (got {_shown(out_dir)})"]
    if "://" in str(out_dir):
        return [f"out_dir: must be a local folder; torch cannot write to URIs like {str(out_dir)!r}"]
    return []


def _probe_out_dir(out_dir: Any) -> list[str]:
    path = Path(out_dir).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe", suffix=".tmp"):
            pass
    except OSError as exc:
        return [f"out_dir: cannot create or write {str(path)!r}: {exc.strerror or exc}"]
    return []


RUN_NAME_FIELDS = ("time", "config_hash")


def _check_run_name(run_name: Any) -> list[str]:
    if run_name is None:
        return []
    if not isinstance(run_name, str) or not run_name.strip():
        return [f"run_name: must be a non-empty string such as '{{time}}-{{config_hash}}' (got {run_name!r})"]
    try:
        names = [name for _, name, spec, _ in string.Formatter().parse(run_name) if name is not None]
    except ValueError as exc:
        return [f"run_name: not a valid template ({exc}): {run_name!r}"]
    bad = [n for n in names if n not in RUN_NAME_FIELDS]
    if bad:
        return [f"run_name: unknown placeholder(s) {bad!r}; known: {', '.join(RUN_NAME_FIELDS)}"]
    if "/" in run_name or "\\" in run_name or run_name.startswith(".") or os.sep in run_name:
        return [f"run_name: must name one visible folder, without path separators (got {run_name!r})"]
    return []


def _unknown_field(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f"{key}: unknown field" + (f" (did you mean {close[0]}?)" if close else "")


def _is_mapping_like(data: Any) -> bool:
    """OmegaConf's DictConfig and similar: keys() and item access without registering as a Mapping."""
    return callable(getattr(data, "keys", None)) and callable(getattr(data, "__getitem__", None)) \
        and not isinstance(data, (str, bytes, list, tuple))


def _plain(value: Any) -> Any:
    """A config value as plain Python: nested list-likes (OmegaConf ListConfig, tuples) become lists."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__") or _is_mapping_like(value):
        return value
    return list(value)


def supported_activity_names() -> set[str]:
    """Lower-case activity names this torch build can record."""
    import torch.profiler  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

    member_to_name = {member: lower for lower, member in ACTIVITY_NAMES.items()}
    return {member_to_name[a.name] for a in torch.profiler.supported_activities() if a.name in member_to_name}


def resolve_activities(activities: Any) -> list:
    """The torch.profiler.ProfilerActivity members to record."""
    import torch.profiler  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

    names = sorted(supported_activity_names()) if activities == AUTO else \
        [activities.lower()] if isinstance(activities, str) else [n.lower() for n in activities]
    return [getattr(torch.profiler.ProfilerActivity, ACTIVITY_NAMES[n]) for n in names]


def _cuda_available() -> bool:
    import torch  # lazy: torch, imported only where profiling runs (the writer process and disabled configs never import it)

    return bool(torch.cuda.is_available())
