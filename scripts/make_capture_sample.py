"""Make sample_traces/capture_cpu_2rank: a real 2-rank gloo CPU capture written by traceattr.capture.

    python3 scripts/make_capture_sample.py [--out sample_traces/capture_cpu_2rank]

Two processes (torch.multiprocessing, gloo over a file rendezvous) train a tiny MLP with an all_reduce of the
gradients every step; both ranks capture one window of 2 active steps (wait=1, warmup=1).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch
import torch.multiprocessing as mp

WORLD = 2


def worker(rank: int, out_dir: str, rendezvous: str) -> None:
    import torch.distributed as dist

    import traceattr.capture as capture

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cfg = capture.CaptureConfig(out_dir=out_dir, ranks="all", wait=1, warmup=1, active=2, repeat=1,
                                barrier_on_stop=True)
    with capture.profile(cfg) as prof:
        for _ in range(5):
            with torch.profiler.record_function("forward_backward"):
                model(torch.randn(8, 32)).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
            prof.step()
    status = prof.status()
    assert status.error is None, status.error
    dist.destroy_process_group()


README = """# capture_cpu_2rank

A real capture made by `traceattr.capture` (torch {torch}, CPU build, gloo backend) with
`scripts/make_capture_sample.py`: two processes train a tiny MLP and all_reduce its gradients every step;
config `ranks="all", wait=1, warmup=1, active=2, repeat=1` (one window of profiler steps 2-3 per rank).

Layout, as every capture writes it:

    rank{{R}}/window0.pt.trace.json.gz   the Kineto trace (distributedInfo written by torch.distributed)
    rank{{R}}/window0.kernels.parquet    exact per-kernel summary (empty here: a CPU-only run has no kernels)
    rank{{R}}/manifest.json              config, torch version, host, world size, windows and step ranges

Try: `traceattr summarize sample_traces/capture_cpu_2rank --by rank`, or
`traceattr.capture.read_run("sample_traces/capture_cpu_2rank")`.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] /
                                             "sample_traces" / "capture_cpu_2rank"))
    out = Path(parser.parse_args().out)
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(str(out), f"{tmp}/rendezvous"), nprocs=WORLD, join=True)
    (out / "README.md").write_text(README.format(torch=torch.__version__))
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({total / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
