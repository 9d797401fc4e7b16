"""Rebuild sample_traces/: a synthetic 2-rank GPU trace set and a real torch CPU capture.

    python3 scripts/make_sample_traces.py            # both
    python3 scripts/make_sample_traces.py synthetic  # only sample_traces/synthetic_2rank (no torch needed)
    python3 scripts/make_sample_traces.py cpu        # only sample_traces/cpu_torch213 (needs torch)

The synthetic set is deterministic (same bytes every run); the CPU capture is a real profile, so its times
and file names change with every run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"

SYNTHETIC_SPEC = dict(ranks=2, world_size=2, steps=(10, 11, 12, 13, 14), streams=(7, 20, 24, 28), layers=4,
                      ops_per_module=2, kernels_per_op=2, with_stack=True, gzip=True, gzip_level=9, seed=2024,
                      rank_scale={1: 1.15}, coupled_collectives=True)


def make_synthetic(folder: Path = SAMPLES / "synthetic_2rank") -> dict:
    """Write the two rank files and a README whose numbers come from the builder's truth."""
    from traceattr.builder import TraceSpec, write_trace_set

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.pt.trace.json*"):
        old.unlink()
    truths = write_trace_set(folder, TraceSpec(**SYNTHETIC_SPEC))
    rows = []
    for rank, truth in truths.items():
        for dev, d in truth.devices.items():
            unlinked = sum(1 for launch in truth.activities["launch"] if not launch)
            rows.append(f"| {Path(truth.path).name} | {rank} | {dev} | {d.activities} | {d.sum_duration_ns:,} | "
                        f"{d.busy_ns:,} | {d.max_concurrency} | {unlinked} |")
    (folder / "README.md").write_text(SYNTHETIC_README.format(spec=SYNTHETIC_SPEC, table="\n".join(rows)))
    return {rank: truth.devices for rank, truth in truths.items()}


SYNTHETIC_README = """# synthetic_2rank: a synthetic 2-rank GPU trace set

**These files are synthetic.** No GPU ran them: `traceattr.builder` wrote them, with timestamps chosen in
exact integer nanoseconds, so every number below is known exactly (it is computed by the builder while it
writes, not by reading the files back). They imitate torch 2.13 Kineto output: one key per line, era C times
relative to `baseTimeNanoseconds`, `distributedInfo` (NCCL, world size 2), gzip.

Rebuild (deterministic, same bytes every time): `python3 scripts/make_sample_traces.py synthetic`, with

    TraceSpec(**{spec})

What is inside, per rank and ProfilerStep#10-#14: an input copy (`Memcpy HtoD`) on stream 24; a forward pass
through `nn.Module` frames `Model_0/Linear_0`, `LayerNorm_0`, `Linear_1`, `ReLU_0` (two ops each, two kernels
per op, every third op on side stream 28), a backward pass (autograd nodes linked to their forward ops by
`Sequence number` and `fwdbwd` flows) with an NCCL allreduce on stream 20 overlapping it, an SGD step with a
`Memset`, a `cudaGraphLaunch` of three kernels sharing one correlation, `gpu_user_annotation` spans and
`Stream Sync` rows (neither is device work), `[memory]` instants, `ac2g` flows, and one kernel per step whose
runtime record was dropped (unlinked).

The ranks are coupled as NCCL and DDP couple them (`coupled_collectives=True`): both share one clock, each
allreduce ends on both ranks together, the last arriver's transfer after it arrived, and the optimizer's
kernels wait for it. Rank 1's kernels run 1.15x longer, so it reaches every allreduce last: it is the
straggler (`traceattr summarize sample_traces/synthetic_2rank --by rank`: last at 5 of 5, where chance alone
would make some rank last that often with p = 0.062). Rank 0 waits inside each allreduce kernel meanwhile,
and waiting keeps a device busy: both ranks are busy for about the same time, so busy time alone would not
find the straggler; the arrivals do.

Exact values (device activities = kernel + memcpy + memset; ns):

| file | rank | device | activities | sum of durations | busy union | max concurrency | unlinked |
|---|---|---|---|---|---|---|---|
{table}

Any correct exclusive-time attribution sums to the "busy union" column per device.
"""


def make_cpu(folder: Path = SAMPLES / "cpu_torch213") -> list[Path]:
    """A real CPU profile: small Conv/Linear/LayerNorm model, two active steps, gzip by torch itself."""
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.pt.trace.json*"):
        old.unlink()
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(4, 8, 3, padding=1)
            self.norm = nn.LayerNorm(16)
            self.head = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def forward(self, x):
            return self.head(self.norm(self.conv(x))).mean(dim=1)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data, target = torch.randn(8, 4, 16), torch.randn(8, 4)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(folder), worker_name="cpu_sample", use_gzip=True),
                 record_shapes=True, with_stack=True) as prof:
        for _ in range(5):
            with record_function("my_forward"):
                loss = nn.functional.mse_loss(model(data), target)
            with record_function("my_backward"):
                optimizer.zero_grad()
                loss.backward()
            with record_function("my_optimizer"):
                optimizer.step()
            prof.step()
    files = sorted(folder.glob("*.pt.trace.json.gz"))
    (folder / "README.md").write_text(CPU_README.format(
        torch=torch.__version__, files="\n".join(_describe(path) for path in files)))
    return files


def _describe(path: Path) -> str:
    import gzip
    from collections import Counter

    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    cats = Counter(ev.get("cat", ev["ph"]) for ev in events)
    top = ", ".join(f"{n} {c}" for c, n in cats.most_common())
    return f"* `{path.name}` ({path.stat().st_size:,} bytes gz): {len(events):,} events: {top}"


CPU_README = """# cpu_torch213: a real torch {torch} CPU trace

A real capture, not synthetic: `python3 scripts/make_sample_traces.py cpu` ran a small model (Conv1d,
LayerNorm, Linear-ReLU-Linear, MSE loss, SGD) for 5 steps under plain `torch.profiler.profile` with
`schedule(wait=1, warmup=1, active=2, repeat=1)`, `record_shapes=True`, `with_stack=True`,
`record_function` ranges `my_forward`, `my_backward`, `my_optimizer`, and
`tensorboard_trace_handler(folder, worker_name="cpu_sample", use_gzip=True)`, which wrote one window
(ProfilerStep#2-#3), gzipped by torch itself. Times, ids and the file name change on every re-capture.

There are no device activities (CPU only): device time is zero and attribution must say so cleanly.

{files}
"""


def main(argv: list[str]) -> int:
    which = set(argv) or {"synthetic", "cpu"}
    if "synthetic" in which:
        print("synthetic_2rank:", make_synthetic())
    if "cpu" in which:
        print("cpu_torch213:", [p.name for p in make_cpu()])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
