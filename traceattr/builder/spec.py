"""TraceSpec: everything a synthetic Kineto trace is made of, as one frozen, validated value."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

ERAS = ("A", "B", "C")                 # kineto-format.md 3.1
LAYOUTS = ("pretty", "lines", "compact")
QUARTER_YEAR_S = 7_889_238             # baseTimeNanoseconds is the wall clock floored to this grid
DEFAULT_BASE_NS = 227 * QUARTER_YEAR_S * 1_000_000_000   # 1790857026000000000, as in the torch 2.13 samples


@dataclass(frozen=True)
class TraceSpec:
    """What to build. Ranks and steps may be given as a count or as explicit numbers.

    Streams per device: `streams[0]` is the compute stream, `streams[1]` carries NCCL, `streams[2]`
    the input copies, `streams[3:]` are side compute streams that every third op launches on.
    Name-keyed knobs (`kernel_scale`, `drop_kernels`) match every kernel whose name contains the key.
    """

    ranks: int | tuple[int, ...] = 1
    world_size: int | None = None                 # default: max(ranks) + 1
    steps: int | tuple[int, ...] = (1, 2, 3)      # ProfilerStep#N numbers (an int n means 1..n)
    devices_per_rank: int = 1                     # rank r uses devices (r * n + i) % visible_devices
    visible_devices: int = 8                      # listed in deviceProperties, like torch does
    streams: tuple[int, ...] = (7, 20, 24, 28)
    layers: int = 4                               # modules under Model_0
    module_classes: tuple[str, ...] = ("Linear", "LayerNorm", "Linear", "ReLU")
    ops_per_module: int = 2
    kernels_per_op: int = 2
    collective: bool = True                       # one NCCL allreduce per step, mid-backward
    # write_trace_set couples the ranks as NCCL and DDP do: each allreduce ends on every rank together, its
    # last arriver's transfer after that rank arrived, and the optimizer's kernels wait for it; the ranks then
    # share one clock (no 1 ms per-rank shift)
    coupled_collectives: bool = False
    memcpy: bool = True                           # HtoD input copy per step (copy stream)
    memcpy_runtime: str = "cudaMemcpyAsync"       # the call that launches it ("cudaMemcpy": a blocking copy)
    memcpy_name: str = ""                         # its device row's name ("": kinds.MEMCPY_NAME, pinned memory)
    step_pause_ns: int = 0                        # the host pauses this long before each step: a device gap
    memset: bool = True                           # zero_ in the optimizer
    annotations: bool = True                      # my_forward / my_backward ranges (+ gpu_user_annotation)
    cuda_sync: bool = True                        # cudaStreamSynchronize per step -> `Stream Sync` row
    cuda_graph: bool = True                       # one cudaGraphLaunch correlation for several kernels
    graph_kernels: int = 3
    dropped_records: int = 1                      # kernels per step whose runtime record CUPTI dropped
    # kernels launched before the profiler started, still queued on each device's compute stream when it
    # does: no runtime record, correlations below every recorded one, the first starting before the first
    # host event and the rest running into the window (attribution/carried.py)
    carried_in: int = 0
    backward: bool = True
    flows: bool = True                            # ac2g and fwdbwd flow events
    profile_memory: bool = True                   # [memory] instants
    with_stack: bool = True                       # python_function frames incl. nn.Module frames
    seed: int = 0
    era: str = "C"
    layout: str = "pretty"
    base_at_end: bool = False                     # 2024-style: baseTimeNanoseconds after traceEvents
    gzip: bool = False
    gzip_level: int = 6
    jitter: float = 0.0                           # sigma of a per-(rank, step) lognormal duration factor
    kernel_scale: dict[str, float] = field(default_factory=dict)
    drop_kernels: tuple[str, ...] = ()
    add_kernels: dict[str, int] = field(default_factory=dict)   # name -> duration ns, once per step
    # forward cpu op name -> its record_shapes args as JSON texts (Input Dims, Input type, Concrete Inputs;
    # "" leaves one out); ops not named write the default [[64, 1024], [1024, 1024], [1024]] floats
    op_shapes: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    rank_scale: dict[int, float] = field(default_factory=dict)  # a straggler: all its kernels slower
    target_bytes: int | None = None               # grow steps until the file is about this size
    base_time_ns: int = DEFAULT_BASE_NS           # era C base; eras A/B use it as the epoch origin

    def __post_init__(self) -> None:
        ranks = tuple(range(self.ranks)) if isinstance(self.ranks, int) else tuple(self.ranks)
        steps = tuple(range(1, self.steps + 1)) if isinstance(self.steps, int) else tuple(self.steps)
        object.__setattr__(self, "ranks", ranks)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "streams", tuple(self.streams))
        object.__setattr__(self, "drop_kernels", tuple(self.drop_kernels))
        if self.world_size is None:
            object.__setattr__(self, "world_size", max(ranks) + 1 if ranks else 1)
        problems = []
        if not ranks or min(ranks) < 0 or len(set(ranks)) != len(ranks):
            problems.append(f"ranks must be distinct non-negative numbers, got {ranks}")
        elif self.world_size <= max(ranks):
            problems.append(f"world_size {self.world_size} must exceed the largest rank {max(ranks)}")
        if not steps or len(set(steps)) != len(steps):
            problems.append(f"steps must be distinct numbers, got {steps}")
        if not self.streams or len(set(self.streams)) != len(self.streams):
            problems.append(f"streams must be distinct ids, got {self.streams}")
        if self.era not in ERAS:
            problems.append(f"era must be one of {ERAS}, got {self.era!r}")
        if self.layout not in LAYOUTS:
            problems.append(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.base_time_ns % (QUARTER_YEAR_S * 1_000_000_000):
            problems.append("base_time_ns must be a multiple of 7,889,238 s, as kineto's are")
        for name in ("layers", "ops_per_module", "kernels_per_op", "devices_per_rank", "visible_devices"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        if not self.module_classes:
            problems.append("module_classes must not be empty")
        if self.memcpy_runtime not in ("cudaMemcpyAsync", "cudaMemcpy"):
            problems.append(f"memcpy_runtime must be cudaMemcpyAsync or cudaMemcpy, got {self.memcpy_runtime!r}")
        if self.step_pause_ns < 0:
            problems.append("step_pause_ns must be >= 0")
        if self.jitter < 0 or any(v <= 0 for v in (*self.kernel_scale.values(), *self.rank_scale.values())):
            problems.append("jitter must be >= 0 and scales > 0")
        if problems:
            raise ValueError("invalid TraceSpec: " + "; ".join(problems))

    @property
    def suffix(self) -> str:
        return ".pt.trace.json.gz" if self.gzip else ".pt.trace.json"

    def with_steps(self, count: int) -> "TraceSpec":
        """The same spec with `count` consecutive steps starting at the first step number."""
        first = self.steps[0]
        return replace(self, steps=tuple(range(first, first + count)))
