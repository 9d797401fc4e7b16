"""One prepared check of traceattr.capture on a CUDA machine (no internet needed).

    PYTHONPATH=. python3 scripts/gpu_capture_check.py --out $OUT

1. A small model on CUDA whose main stream runs matmuls while a side stream runs a second matmul and a
   host-to-device copy concurrently, for 12 steps under traceattr.capture (wait=1, warmup=1, active=3,
   repeat=2, with_stack=True): two windows per the schedule.
2. A short second capture with the CUDA memory snapshot on (history for the window only).
3. `traceattr summarize` (--by kernel, --by rank) on the output, plus the conservation check
   (sum of kernel self time == busy time per device) through the Python API.
Everything is printed and logged to $OUT/log.txt; at most 8 small files are copied to $OUT.
Nothing here raises: each part prints its failure and the script goes on. Without CUDA it exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

LOG: list[str] = []


def say(*parts) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    LOG.append(line)


@contextlib.contextmanager
def part(title: str):
    say(f"\n=== {title} ===")
    start = time.perf_counter()
    try:
        yield
    except BaseException as exc:  # noqa: BLE001 - report and go on
        if isinstance(exc, KeyboardInterrupt):
            raise
        say(f"FAILED: {type(exc).__name__}: {exc}")
        say(traceback.format_exc())
    say(f"--- {title}: {time.perf_counter() - start:.1f} s")


def environment() -> bool:
    import importlib

    say("python", sys.version.split()[0])
    for name in ("torch", "numpy", "pandas", "pyarrow", "msgspec", "isal", "click", "rich"):
        try:
            module = importlib.import_module(name)
            say(f"  {name:8s} {getattr(module, '__version__', '?')}")
        except Exception as exc:  # noqa: BLE001
            say(f"  {name:8s} MISSING ({type(exc).__name__}: {exc})")
    import torch

    if not torch.cuda.is_available():
        say("no CUDA device: nothing to check on this machine")
        return False
    say("cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0),
        "supported activities", torch.profiler.supported_activities())
    return True


def two_stream_training(out_dir: Path, steps: int, memory_snapshot: bool = False, **schedule) -> object:
    import torch

    import traceattr.capture as capture

    device = torch.device("cuda")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 1024)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    side = torch.cuda.Stream()
    side_a = torch.randn(2048, 2048, device=device)
    host_block = torch.randn(8 * 1024 * 1024 // 4).pin_memory()     # 8 MiB pinned: async H2D on the side stream
    cfg = capture.CaptureConfig(out_dir=str(out_dir), ranks="all", activities=["cpu", "cuda"],
                                kernel_summary=analysis_available(), with_stack=not memory_snapshot, memory_snapshot=memory_snapshot, **schedule)
    say("config", cfg.to_dict())
    with capture.profile(cfg) as prof:
        for step in range(steps):
            torch.cuda.current_stream().wait_stream(side)     # side work of the previous step is done
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):                     # runs while the main stream computes
                side_out = side_a @ side_a
                on_device = host_block.to(device, non_blocking=True)
            with torch.profiler.record_function("forward_backward"):
                loss = model(torch.randn(256, 1024, device=device)).square().mean()
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del side_out, on_device
            status = prof.step()
        torch.cuda.synchronize()
        say("last step() status:", status)
    final = prof.status()
    say("stop() status:", final)
    return final


def analysis_available() -> bool:
    """The kernel summary needs the analysis stack (pyarrow, msgspec, ...); without it, capture traces only."""
    try:
        import traceattr.analysis.summarize  # noqa: F401
        import traceattr.io.load  # noqa: F401
        return True
    except Exception as exc:  # noqa: BLE001
        say(f"analysis stack not importable ({exc}): kernel_summary off")
        return False


def history_is_off() -> bool:
    """New allocations add no trace entries once the capture turned history off."""
    import torch

    def entries() -> int:
        return sum(len(t) for t in torch.cuda.memory._snapshot().get("device_traces", []))

    before = entries()
    probe = torch.empty(1 << 20, device="cuda")
    del probe
    return entries() == before


def show_run(out_dir: Path) -> None:
    from traceattr.capture import read_run

    run = read_run(out_dir)
    say("ranks", run.ranks, "world", run.world_size, "ok", run.ok, "missing", run.missing_files)
    for window in run.windows:
        say("  window", json.dumps(window))
    for rank, errors in run.errors.items():
        for error in errors:
            say("  ERROR rank", rank, error)
    for path in sorted(out_dir.rglob("*")):
        if path.is_file():
            say(f"  {path.stat().st_size:>10,d}  {path.relative_to(out_dir)}")


def cli_summaries(out_dir: Path) -> None:
    for by in ("kernel", "rank"):
        cmd = [sys.executable, "-c", "from traceattr.cli import main; main()", "summarize", str(out_dir),
               "--by", by, "--top", "25"]
        say("$", " ".join(cmd[3:]))
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                              env={**__import__("os").environ, "COLUMNS": "200"})
        say(done.stdout)
        if done.returncode:
            say(f"exit {done.returncode}: {done.stderr[-3000:]}")


def conservation(out_dir: Path) -> None:
    import pyarrow.parquet as pq

    import traceattr
    from traceattr import schema as S

    ts = traceattr.load(str(out_dir))
    kernels = traceattr.summarize(ts, by="kernel")
    ranks = traceattr.summarize(ts, by="rank")
    self_sum = kernels.groupby([S.RANK, S.DEVICE])[S.SELF_NS].sum()
    for _, row in ranks.iterrows():
        key = (row[S.RANK], row[S.DEVICE])
        got = int(self_sum.get(key, 0))
        say(f"rank {key[0]} device {key[1]}: busy {int(row[S.BUSY_NS]):,} ns, sum self {got:,} ns, "
            f"sum durations {int(kernels[(kernels[S.RANK] == key[0]) & (kernels[S.DEVICE] == key[1])][S.DURATION_NS].sum()):,} ns, "
            f"conserved: {got == int(row[S.BUSY_NS])}")
    streams = ts.device.to_pandas().groupby(S.DEVICE)[S.STREAM].nunique().to_dict()
    say("streams per device", streams)
    for parquet in sorted(out_dir.rglob("*.kernels.parquet")):
        table = pq.read_table(parquet).to_pandas()
        say(f"{parquet.relative_to(out_dir)}: {len(table)} kernel rows, sum self {int(table[S.SELF_NS].sum()):,} ns")


def copy_out(sources: list[tuple[Path, str]], out: Path, limit_bytes: int = 3_000_000) -> None:
    copied = 0
    for src, name in sources:
        if copied >= 7 or not src.is_file():
            continue
        if src.stat().st_size > limit_bytes:
            say(f"not copied (too big: {src.stat().st_size:,} bytes): {src}")
            continue
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        copied += 1
        say("copied", target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder that receives the small result files")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_capture_"))
    has_cuda = False
    with part("environment"):
        has_cuda = environment()
    if has_cuda:
        main_dir, mem_dir = work / "two_streams", work / "memory"
        with part("capture: two streams, 12 steps, wait=1 warmup=1 active=3 repeat=2, with_stack"):
            two_stream_training(main_dir, 12, wait=1, warmup=1, active=3, repeat=2)
        with part("run view of the capture"):
            show_run(main_dir)
        with part("traceattr summarize"):
            cli_summaries(main_dir)
        with part("conservation: sum of self == busy per device"):
            conservation(main_dir)
        with part("capture with the CUDA memory snapshot"):
            two_stream_training(mem_dir, 4, memory_snapshot=True, wait=1, warmup=1, active=1, repeat=1)
            show_run(mem_dir)
            say("allocator history off after the capture:", history_is_off())
        with part("copy results"):
            r0 = main_dir / "rank0"
            copy_out([(r0 / "manifest.json", "two_streams/rank0/manifest.json"),
                      (r0 / "window0.pt.trace.json.gz", "two_streams/rank0/window0.pt.trace.json.gz"),
                      (r0 / "window0.kernels.parquet", "two_streams/rank0/window0.kernels.parquet"),
                      (r0 / "window1.kernels.parquet", "two_streams/rank0/window1.kernels.parquet"),
                      (mem_dir / "rank0" / "manifest.json", "memory/rank0/manifest.json"),
                      (mem_dir / "rank0" / "window0.memory.pickle", "memory/rank0/window0.memory.pickle")],
                     out)
    (out / "log.txt").write_text("\n".join(LOG) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
