"""Does capture stall training? Step times around window closes, and the cost of step() where capture does
nothing.

1. A CPU training loop (an MLP of many small layers, so each window's trace is a few MB) runs under
   traceattr.capture with kernel_summary and compress on, with_stack off and on. For every window, the
   median of the 10 steps after it closes is compared with the steady state (the median of the 10 steps
   just before the window's warmup, far from any window). Target: within +10%.
   The step that closes a window pays for torch's own export_chrome_trace on the training thread; that step
   is reported separately and not counted in the 10.
2. Profiler.step() on a disabled config and on a non-selected rank. Target: under 1 µs per call.

Run: python3 benchmarks/bench_capture_step.py [--windows 5] [--control] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import timeit
import warnings

import torch

from traceattr.capture import CaptureConfig, Profiler, read_run

WAIT, WARMUP, ACTIVE, AFTER = 24, 1, 3, 10
CALLS = 1_000_000
LAYERS, WIDTH = 160, 32       # many small ops: a trace of a few MB per window, like a real model's


def make_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def run(with_stack: bool, windows: int, out_dir: str, writer: bool = True) -> dict:
    model, opt = make_model()
    batch = torch.randn(16, WIDTH)
    cfg = CaptureConfig(out_dir=out_dir, wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=windows,
                        with_stack=with_stack, kernel_summary=writer, compress=writer, flush_timeout_s=300)
    cycle = cfg.cycle
    times, step_calls = [], []     # whole step; the prof.step() call alone (capture's own cost)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Profiler(cfg) as prof:
            for _ in range(windows * cycle + AFTER + 1):
                start = time.perf_counter()
                model(batch).sum().backward()
                opt.step()
                opt.zero_grad()
                before_step = time.perf_counter()
                prof.step()
                end = time.perf_counter()
                times.append(end - start)
                step_calls.append(end - before_step)
    status = prof.status()
    rows, pooled = [], {"steady": [], "after": []}
    for w in range(windows):
        close = w * cycle + cycle - 1         # the step whose prof.step() ends window w (torch exports there)
        steady = times[close - ACTIVE - WARMUP - AFTER:close - ACTIVE - WARMUP]
        after = times[close + 1:close + 1 + AFTER]
        rows.append((w, statistics.median(steady), times[close], statistics.median(after),
                     max(step_calls[close + 1:close + 1 + AFTER])))
        pooled["steady"] += steady
        pooled["after"] += after
    sizes = [os.path.getsize(w["trace"]) for w in read_run(out_dir).windows if w.get("trace")]
    return {"rows": rows, "status": status, "sizes": sizes, **pooled}


def bench_stalls(windows: int, control: bool) -> None:
    print(f"steady = median of the {AFTER} steps before a window's warmup; after = median of the {AFTER} "
          "steps after it closes")
    cases = [(False, True), (True, True)] + ([(False, False), (True, False)] if control else [])
    for with_stack, writer in cases:
        out = tempfile.mkdtemp(prefix="bench_capture_stall_")
        result = run(with_stack, windows, out, writer)
        status = result["status"]
        mb = ", ".join(f"{s / 1e6:.1f}" for s in result["sizes"])
        what = "kernel_summary+compress" if writer else "control: no summary, no gzip (no writer process)"
        print(f"\nwith_stack={with_stack}, {what}: {status.windows} windows written, state {status.state}, "
              f"trace MB per window: {mb}")
        print("| window | steady ms | closing step ms (export) | after ms | after / steady "
              "| longest prof.step() after, ms |")
        print("|---|---|---|---|---|---|")
        ratios = []
        for w, steady, closing, after, longest in result["rows"]:
            ratios.append(after / steady - 1)
            print(f"| {w} | {steady * 1e3:.2f} | {closing * 1e3:.1f} | {after * 1e3:.2f} | "
                  f"{after / steady - 1:+.1%} | {longest * 1e3:.3f} |")
        steady, after = (statistics.median(result[k]) for k in ("steady", "after"))
        print(f"| all steps pooled | {steady * 1e3:.2f} | | {after * 1e3:.2f} | {after / steady - 1:+.1%} | |")
        print(f"| median of the window ratios | | | | {statistics.median(ratios):+.1%} | |")


def per_call_ns(prof: Profiler) -> float:
    best = min(timeit.repeat(prof.step, number=CALLS, repeat=5))
    return best / CALLS * 1e9


def bench_idle_step() -> None:
    out = tempfile.mkdtemp(prefix="bench_capture_")
    disabled = Profiler(CaptureConfig(enabled=False))
    disabled.start()
    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    os.environ.update(RANK="1", WORLD_SIZE="2")
    other = Profiler(CaptureConfig(out_dir=out, ranks=0))
    assert other.start().state == "not_selected"
    for key, value in saved.items():
        os.environ.pop(key) if value is None else os.environ.update({key: value})
    empty = timeit.repeat(lambda: None, number=CALLS, repeat=5)
    print(f"\ndisabled config : {per_call_ns(disabled):6.1f} ns per step()")
    print(f"non-selected rank: {per_call_ns(other):6.1f} ns per step()")
    print(f"(an empty lambda : {min(empty) / CALLS * 1e9:6.1f} ns per call)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--control", action="store_true", help="also run without summary and gzip")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the training loop")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} intra-op thread(s), {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    bench_stalls(args.windows, args.control)
    bench_idle_step()


if __name__ == "__main__":
    main()
