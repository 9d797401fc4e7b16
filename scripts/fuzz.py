"""Fuzz the trace reader: byte-mutated real traces and structurally generated ones, in-process.

    python scripts/fuzz.py --mutated 10000 --generated 20000 [--traces ../shared/traces] [--jobs 2]

Each input is written to a temporary file and run through the whole read path (decode_file with a random,
often tiny, block size so that small inputs exercise the streaming splitter; assemble; summarize by kernel
and by rank, with Σ self == busy checked per (rank, device); markdown rendering). Every input ends in one
class: `loaded`, `clean` (a TraceError: the one line a user sees), `other` (any other exception, numpy
cast warnings included: the goal is 0), `hang` (over --timeout seconds: the goal is 0), or `wrong`
(loaded, but the conservation law fails: the goal is 0). Inputs run in batches in worker processes, so a
crash or a leak stays in one batch and each batch's peak RSS is measured. The counts are printed as the
markdown table of docs/robustness.md; examples of `other`, `hang` and `wrong` are written to --out.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import gzip
import json
import os
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = Path(os.environ.get("TRACEATTR_SHARED_TRACES", REPO / ".." / "shared" / "traces"))
CLASSES = ("loaded", "clean", "other", "hang", "wrong")
_SMALL_SEEDS_BYTES = 4 << 20          # seed traces up to this inflated size (bigger ones are slow per input)


class Hang(BaseException):
    """Raised by the alarm: an input ran past the timeout (BaseException: no `except Exception` eats it)."""


def _alarm(signum, frame):
    raise Hang()


# -- inputs --------------------------------------------------------------------------------------------------

def seed_texts(root: Path) -> list[bytes]:
    texts = []
    for path in sorted(root.rglob("*.json*")):
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        if len(text) <= _SMALL_SEEDS_BYTES:
            texts.append(text)
    return texts


_INTERESTING = [b"0", b"-1", b"1e300", b"-9.3e15", b"9.3e15", b"2.2e+16", b"1e16", b"null", b"true", b'"x"',
                b"100000000000000000000", b"18446744073709551616", b"2147483648", b"[]", b"{}", b"\x1b]0;x\x07",
                b"\xff", b"\xc3", b'"\\ud800"', b"[" * 3000, b"}", b",", b'"traceEvents":[]', b"1.5", b"-0"]


def mutate(text: bytes, rng: random.Random) -> bytes:
    data = bytearray(text)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        at = rng.randrange(len(data) + 1)
        op = rng.randrange(6)
        if op == 0 and data:                                   # flip a byte
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op == 1:                                          # delete a run
            del data[at:at + rng.choice((1, 2, 10, 100, 5000))]
        elif op == 2:                                          # insert something interesting
            data[at:at] = rng.choice(_INTERESTING)
        elif op == 3:                                          # replace a number
            digit = data.find(b"1", at)
            if digit >= 0:
                data[digit:digit + 1] = rng.choice(_INTERESTING)
        elif op == 4:                                          # duplicate a slice
            size = rng.choice((10, 100, 1000))
            data[at:at] = data[at:at + size]
        else:                                                  # truncate
            del data[at:]
    return bytes(data)


_NAMES = ["k", "ncclKernel_AllReduce", "void gemm<float>(...)", "a|b*c_d`e[f](g)<script>x</script>", "\x1b[2J\x1b]0;pwn\x07",
          "line\nbreak\r", "ünïcødé", "", " ", "# heading", "\t", "x" * 300]
_CATS = ["kernel", "gpu_memcpy", "gpu_memset", "cpu_op", "cuda_runtime", "user_annotation", "gpu_user_annotation",
         "python_function", "Trace", "overhead", "cuda_driver", "weird_cat", "Kernel", "ac2g"]
_PHASES = ["X", "X", "X", "X", "i", "s", "f", "M", "B", "E", "C", "x", ""]


def _number(rng: random.Random, small: float, hostility: float):
    if rng.random() >= hostility:
        return round(rng.uniform(0, small), rng.choice((0, 3)))
    return rng.choice([0, -1, -5.5, 1e300, -1e300, 9.3e15, -9.3e15, 2.2e16, 1e16, 2**63, 2**64, 10**20, -(2**63) - 1,
                       1.7e15 + rng.random(), 1e-300, 0.0001, None, "12", True, [], {}])


_DEEP = "__deep__"          # replaced by deeply nested JSON text (json.dumps itself would recurse)


def _nested(rng: random.Random) -> bytes:
    depth = rng.choice((10, 900, 6000, 50_000))
    opening, closing = (b"[", b"]") if rng.random() < 0.5 else (b'{"a":', b"}")
    return opening * depth + b"1" + closing * depth


def generate(rng: random.Random) -> tuple[bytes, str]:
    """(text, file name) of one structurally generated trace."""
    base_us = rng.choice([0.0, 1.7e15, 1000.0])
    hostility = rng.choice((0.0, 0.003, 0.02, 0.2))     # chance of a hostile value in each field
    events = []
    for _ in range(rng.randrange(0, 60)):
        event = {"ph": rng.choice(_PHASES), "cat": rng.choice(_CATS), "name": rng.choice(_NAMES),
                 "pid": rng.choice([0, 1, 7, "Spans", -1, 2**63, 2**64, 10**20]) if rng.random() < hostility else rng.choice([0, 1]),
                 "tid": rng.choice([7, 8, 9, "stream 7", -3]),
                 "ts": _number(rng, 1000, hostility), "dur": _number(rng, 50, hostility)}
        if type(event["ts"]) is float and rng.random() < 0.9:
            event["ts"] += base_us
        if rng.random() < 0.5:
            event["args"] = {"correlation": rng.choice([1, 2, 3, -1, 2**64, "x", None] if rng.random() < hostility else [1, 2, 3]),
                             "External id": rng.choice([1, 2, 2**63]),
                             "Collective name": rng.choice(["", "allreduce", 5])}
        if rng.random() < 0.002:
            event["args"] = {"deep": _DEEP}
        for key in [k for k in event if rng.random() < hostility / 2]:
            del event[key]
        events.append(event)
    doc: dict = {"schemaVersion": 1}
    if rng.random() < 0.3:
        doc["distributedInfo"] = {"rank": rng.choice([0, 1, 3, 0, 1, 3, -1, 2**31, 2**40, "2", "x"]),
                                  "world_size": rng.choice([1, 4, 4, 4, 2**40, 0, -5])}
    if rng.random() < 0.2:
        doc["baseTimeNanoseconds"] = rng.choice([1_700_000_000_000_000_000] * 4 + [0, 10**30, -5, 1.5, "x"])
    if rng.random() < 0.1:
        doc["displayTimeUnit"] = rng.choice(["ns", "ms", 3])
    doc["traceEvents"] = events
    if rng.random() < 0.05:
        doc["deviceProperties"] = [{"id": 0, "name": rng.choice(_NAMES)}]
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    if _DEEP.encode() in text:
        text = text.replace(b'"' + _DEEP.encode() + b'"', _nested(rng))
    if rng.random() < 0.05:                       # a second traceEvents key after the first
        text = text[:-1] + b', "traceEvents": []}'
    name = rng.choice(["trace.json", "rank1.json", "rank_3.pt.trace.json", "worker\x1b[31m.json", "a\nb.json"] * 3
                      + ["rank2147483648.json", f"rank{'9' * 30}.json"])
    return text, name


# -- one input -------------------------------------------------------------------------------------------

def run_one(path: str, block_bytes: int) -> str:
    """The class of one input file ("loaded", "clean", or "wrong"); other exceptions propagate."""
    import numpy as np

    import traceattr
    from traceattr import schema as S
    from traceattr.errors import TraceError
    from traceattr.io.decode import decode_file
    from traceattr.io.load import assemble
    from traceattr.report.render import render

    try:
        decoded = decode_file(path, block_bytes=block_bytes)
        traceset = assemble([decoded], origin=path)
        kernels = traceattr.summarize(traceset, by="kernel")
        ranks = traceattr.summarize(traceset, by="rank")
        render(kernels.head(20), "markdown", header={"notes": list(traceset.notes)[:5]})
    except TraceError:
        return "clean"
    keys = [S.RANK, S.DEVICE]
    self_ns = kernels.groupby(keys)[S.SELF_NS].sum()
    busy = ranks.set_index(keys)[S.BUSY_NS]
    if not np.array_equal(self_ns.reindex(busy.index, fill_value=0).to_numpy(), busy.to_numpy()) \
            or int(self_ns.sum()) != int(busy.sum()):
        return "wrong"
    return "loaded"


def run_batch(job: tuple[str, int, int, int, float, str]) -> dict:
    """Worker: `count` inputs of one kind from `seed`; returns the counts, examples and peak RSS."""
    kind, seed, count, first, timeout_s, traces = job
    warnings.simplefilter("error", RuntimeWarning)          # a numpy cast warning is a finding
    signal.signal(signal.SIGALRM, _alarm)
    rng = random.Random(seed)
    seeds = seed_texts(Path(traces)) if kind == "mutated" else []
    counts: Counter = Counter()
    examples: list[dict] = []
    slowest = 0.0
    with tempfile.TemporaryDirectory(prefix="traceattr-fuzz-") as tmp:
        for number in range(first, first + count):
            if kind == "mutated":
                text, name = mutate(rng.choice(seeds), rng), "rank0.trace.json"
            else:
                text, name = generate(rng)
            folder = Path(tmp) / str(number)
            folder.mkdir()
            path = folder / name
            path.write_bytes(gzip.compress(text, 1) if rng.random() < 0.2 else text)
            block_bytes = rng.choice((64, 256, 4096) if len(text) < 1 << 16 else (4096, 1 << 16, 1 << 20))
            began = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            try:
                outcome = run_one(str(path), block_bytes)
            except Hang:
                outcome = "hang"
            except BaseException as exc:    # noqa: BLE001 - every other exception is the finding
                outcome = "other"
                detail = "".join(traceback.format_exception(exc)[-4:])
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            slowest = max(slowest, time.monotonic() - began)
            counts[outcome] += 1
            if outcome in ("other", "hang", "wrong") and len(examples) < 20:
                examples.append({"kind": kind, "number": number, "outcome": outcome, "name": name,
                                 "block_bytes": block_bytes, "input": text[:1 << 18].decode("latin-1"),
                                 "detail": detail if outcome == "other" else ""})
            for child in folder.iterdir():
                child.unlink()
            folder.rmdir()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"kind": kind, "counts": dict(counts), "examples": examples, "peak_rss": rss, "slowest_s": slowest}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutated", type=int, default=10_000)
    parser.add_argument("--generated", type=int, default=20_000)
    parser.add_argument("--traces", default=str(DEFAULT_TRACES), help="real traces to mutate")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per input before it is a hang")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", default="fuzz-findings.json", help="examples of other/hang/wrong inputs")
    args = parser.parse_args(argv)
    if args.mutated and not seed_texts(Path(args.traces)):
        parser.error(f"no traces to mutate under {args.traces}")
    jobs = []
    for kind, total in (("mutated", args.mutated), ("generated", args.generated)):
        for first in range(0, total, args.batch):
            jobs.append((kind, args.seed * 1_000_003 + len(jobs), min(args.batch, total - first), first,
                         args.timeout, args.traces))
    totals = {kind: Counter() for kind in ("mutated", "generated")}
    peak = {kind: 0 for kind in totals}
    slowest = {kind: 0.0 for kind in totals}
    examples: list[dict] = []
    began = time.monotonic()
    with cf.ProcessPoolExecutor(args.jobs, max_tasks_per_child=1) as pool:
        for done, result in enumerate(pool.map(run_batch, jobs), 1):
            kind = result["kind"]
            totals[kind].update(result["counts"])
            peak[kind] = max(peak[kind], result["peak_rss"])
            slowest[kind] = max(slowest[kind], result["slowest_s"])
            examples.extend(result["examples"])
            print(f"[{done}/{len(jobs)}] {kind} {dict(result['counts'])} ({time.monotonic() - began:.0f} s)",
                  file=sys.stderr, flush=True)
    Path(args.out).write_text(json.dumps(examples, indent=1))
    print(f"| inputs | tried | {' | '.join(CLASSES)} | slowest input | peak RSS of a batch process |")
    print("|---|---:|" + "---:|" * len(CLASSES) + "---:|---:|")
    for kind in totals:
        counts = totals[kind]
        print(f"| {kind} | {sum(counts.values()):,} | " + " | ".join(f"{counts[c]:,}" for c in CLASSES)
              + f" | {slowest[kind]:.2f} s | {peak[kind] / 2**20:.0f} MiB |")
    print(f"\n{time.monotonic() - began:.0f} s; examples of other/hang/wrong in {args.out}", file=sys.stderr)
    return 0 if not any(totals[k][c] for k in totals for c in ("other", "hang", "wrong")) else 1


if __name__ == "__main__":
    sys.exit(main())
