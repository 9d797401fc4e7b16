"""Mangled C++ names made readable for display, by LLVM's demangler (the `pycxxfilt` package).

ROCm traces name some kernels by their mangled symbol (`_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16b…`:
`void aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, …, 256, 16, …>(…)`). Only the names people read are
demangled (names.py's display names); the decoded columns, csv/json and compare keys keep the trace's own
names, so two runs compare alike whatever is installed.

A mangled name is hostile input: its back-references may each repeat everything before them, so 254
characters can ask for 436 MB of output, and the demangler is C++ that no thread can stop. So the names
(at most MAX_MANGLED characters, only the characters of a symbol) are demangled in a child process with a
memory limit and a time limit, each distinct name once per process; a name it cannot demangle, a result
longer than MAX_DEMANGLED, a name that ends its child (the next names go to a new one, up to CHILD_FAILURES
children), or no `pycxxfilt` (it needs Python 3.11) leaves the name as it was.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Iterable

MAX_MANGLED = 8192              # real CUTLASS symbols reach ~2,500 characters
MAX_DEMANGLED = 16384           # a longer result is no display name
CHILD_MEMORY_BYTES = 256 << 20  # the child's address space (it starts in 20 MB): a name asking for more ends
#                                 the child (in about a second), not this process
CHILD_SECONDS = 5               # for one child; the names done by then are kept
CHILD_FAILURES = 3              # children ended by a name before the rest are left as they are
_CACHE_LIMIT = 100_000          # distinct names remembered (a long-running process stays bounded)
_MANGLED = re.compile(r"_Z[A-Za-z0-9_.$]+(?:@@?[A-Za-z0-9_.]+)?")

_CHILD = f"""
import json, sys
try:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, ({CHILD_MEMORY_BYTES}, {CHILD_MEMORY_BYTES}))
except Exception:
    pass
import pycxxfilt
for line in sys.stdin:
    try:
        text = pycxxfilt.demangle(json.loads(line))
    except Exception:
        text = None
    if text is not None and len(text) > {MAX_DEMANGLED}:
        text = None
    sys.stdout.write(json.dumps(text) + "\\n")
    sys.stdout.flush()
"""

_known: dict[str, str | None] = {}     # mangled name -> readable name (None: leave it as it is)


def is_mangled(name: str) -> bool:
    return len(name) <= MAX_MANGLED and _MANGLED.fullmatch(name) is not None


def readable_names(names: Iterable[str]) -> dict[str, str]:
    """{name: demangled name} for the mangled names among `names` that demangle (others are absent)."""
    wanted = [name for name in dict.fromkeys(names) if isinstance(name, str) and is_mangled(name)]
    new = [name for name in wanted if name not in _known]
    if new:
        if len(_known) + len(new) > _CACHE_LIMIT:
            _known.clear()
        _known.update(zip(new, _demangle_in_child(new)))
    return {name: _known[name] for name in wanted if _known.get(name)}


def readable(name: str) -> str:
    """One name demangled when it is a mangled C++ symbol that demangles, else as it was."""
    return readable_names([name]).get(name, name)


def _demangle_in_child(names: list[str]) -> list[str | None]:
    """The names demangled by child processes (one per line, in order); None for each not answered. A name
    that ends its child is skipped and the names after it go to a new child."""
    answers: list[str | None] = [None] * len(names)
    if importlib.util.find_spec("pycxxfilt") is None:
        return answers
    start, failures = 0, 0
    while start < len(names) and failures < CHILD_FAILURES:
        done, finished = _child(names[start:])
        answers[start:start + len(done)] = done
        start += len(done)
        if not finished:
            failures += 1
            start += 1          # the name the child was on when it ended
    return answers


def _child(names: list[str]) -> tuple[list[str | None], bool]:
    """(the answers a child gave, in order, before it ended; whether it answered every name)."""
    request = "".join(json.dumps(name) + "\n" for name in names)
    try:
        out = subprocess.run([sys.executable, "-c", _CHILD], input=request.encode(), capture_output=True,
                             timeout=CHILD_SECONDS, check=False).stdout
    except subprocess.TimeoutExpired as expired:     # a name that takes too long: keep those done before it
        out = expired.stdout or b""
    except OSError:
        return [], False
    answers: list[str | None] = []
    for line in out.decode("utf-8", "replace").splitlines()[:len(names)]:
        try:
            text = json.loads(line)
        except ValueError:
            break
        answers.append(text if isinstance(text, str) and text else None)
    return answers, len(answers) == len(names)
