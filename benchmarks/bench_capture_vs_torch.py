"""traceattr.capture against plain torch.profiler: the steps at and right after each window's export
(issue 36 point 10: within 5%).

Both run the same CPU training loop and schedule (wait 24, warmup 1, active 3, `--windows` windows) and
write a Chrome trace per window: plain torch with `on_trace_ready` calling `export_chrome_trace` (the usual
handler), traceattr with its defaults (gzip and kernel summaries in its writer process, at the lowest
priority). Runs alternate (torch, traceattr, torch, ...; `--rounds` of each) so machine load drifts over
both alike. Per window: the export step (the one that closes the window) and the median of the 10 steps
after it. Printed per round and as the median over rounds of traceattr / torch.

    python3 benchmarks/bench_capture_vs_torch.py --rounds 4 --windows 4
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import tempfile
import time

import torch

from traceattr.capture import CaptureConfig, Profiler

from bench_capture_step import ACTIVE, AFTER, WAIT, WARMUP, WIDTH, make_model   # the same loop and schedule


def train(step, steps: int) -> list[float]:
    """Seconds of each step, `step()` (the profiler's) included."""
    model, optimizer = make_model()
    data = torch.randn(64, WIDTH)
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        optimizer.zero_grad()
        model(data).sum().backward()
        optimizer.step()
        step()
        times.append(time.perf_counter() - started)
    return times


def closing_steps(windows: int) -> list[int]:
    """Index of the step whose step() closes each window (its export runs in it)."""
    cycle = WAIT + WARMUP + ACTIVE
    return [n * cycle + cycle - 1 for n in range(windows)]


def plain_torch(folder: str, windows: int) -> list[float]:
    def export(prof):
        prof.export_chrome_trace(os.path.join(folder, f"window{prof.step_num}.pt.trace.json"))
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], on_trace_ready=export,
                                  schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE,
                                                                   repeat=windows))
    with prof:
        return train(prof.step, closing_steps(windows)[-1] + AFTER + 2)


def with_traceattr(folder: str, windows: int) -> list[float]:
    config = CaptureConfig(out_dir=folder, wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=windows,
                           activities=("cpu",))
    with Profiler(config) as prof:
        return train(prof.step, closing_steps(windows)[-1] + AFTER + 2)


def measure(times: list[float], windows: int) -> tuple[float, float]:
    """(median export step s, median over windows of the median of the AFTER steps after it)."""
    closes = closing_steps(windows)
    export = statistics.median(times[c] for c in closes)
    after = statistics.median(statistics.median(times[c + 1:c + 1 + AFTER]) for c in closes)
    return export, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--windows", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}, "
          f"torch {torch.__version__}, {args.rounds} rounds x {args.windows} windows")
    ratios_export, ratios_after = [], []
    for round_ in range(args.rounds):
        found = {}
        for name, run in (("torch", plain_torch), ("traceattr", with_traceattr)):
            with tempfile.TemporaryDirectory() as folder:
                found[name] = measure(run(folder, args.windows), args.windows)
        (te, ta), (ce, ca) = found["torch"], found["traceattr"]
        ratios_export.append(ce / te)
        ratios_after.append(ca / ta)
        print(f"round {round_}: export step torch {te * 1e3:.1f} ms, traceattr {ce * 1e3:.1f} ms; "
              f"10 steps after: torch {ta * 1e3:.2f} ms, traceattr {ca * 1e3:.2f} ms")
    print(f"median traceattr / torch: export step {statistics.median(ratios_export):.3f}, "
          f"steps after {statistics.median(ratios_after):.3f} (load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
