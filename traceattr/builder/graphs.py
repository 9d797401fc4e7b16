"""Graph replay + capture trace pairs with known truth (docs/inference.md; attribution/graphs.py).

build_graph_pair writes, in `folder`:
* `replay.json`: ProfilerStep#1..N, each under `step[DECODE bs=B]` (B from `replay_batch_sizes`): one graph
  launch per step ("full", as vLLM's and SGLang's full graphs) or one per piece with an eager attention op
  between pieces ("piecewise", vLLM's default), each launch under the python frame `graphs.py(139): replay`
  and no cpu op; an eager `aten::argmax` after the graphs;
* `capture_traces/bs_{B}.json` per captured batch size (`capture=True`): ProfilerStep#1 > `capture_B`, and
  per graph a `cudaStreamBeginCapture` ... `cudaStreamEndCapture` range whose launches sit under their cpu
  ops and nn.Module frames (kernels never run), with `args.kernel` unless `kernel_names=False` (CUDA's
  cudaLaunchKernel writes none); plus `execution_details.json`.
The GEMM kernel's name depends on the batch size (`gemm_small` up to 8, else `gemm_large`), so the batch
size decides which capture holds a replay's names. With `node_ids`, replayed kernels carry `graph id` and
`graph node id` and run pairwise swapped in time, so only the node ids give the capture's order.
GraphTruth holds per replayed/eager kernel its expected op, op stack and module: with a capture, the
capture launch's; without, `<graph replay: graphs.py(139): replay>` and the launch's (empty) stack.
Every cpu op carries record_shapes args (op_args: dims from the batch size and layer, so each capture and
each op call of a graph has its own); the `shape` truth of a kernel is its innermost op's (name, Input Dims,
Input type, Concrete Inputs), the op call the shape level counts (an `aten::mm` under `aten::linear`: the
modelled GEMM), and its `call` names the op call (a replayed graph's op counts once per replay).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

LAYOUTS = ("full", "piecewise")
REPLAY_FRAME = "graphs.py(139): replay"
FALLBACK_OP = f"<graph replay: {REPLAY_FRAME}>"
_BASE_NS = 1790857026000000000
_PID, _TID, _DEVICE, _STREAM = 100, 100, 0, 7


@dataclass(frozen=True)
class GraphPairSpec:
    layout: str = "full"
    captured_batch_sizes: tuple[int, ...] = (8, 16, 32)
    replay_batch_sizes: tuple[int, ...] = (5, 16, 30, 8)   # one step each; rounded up to a captured size
    layers: int = 4                                         # full: all in one graph; piecewise: one piece each
    node_ids: bool = False
    kernel_names: bool = True
    capture: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}")
        if not self.captured_batch_sizes or max(self.replay_batch_sizes) > max(self.captured_batch_sizes):
            raise ValueError("every replayed batch size needs a captured one at least as large")


@dataclass
class GraphTruth:
    replay: str
    captures: list[str]
    busy_ns: int
    kernels: dict[str, list] = field(default_factory=lambda: {
        "name": [], "start_ns": [], "end_ns": [], "op": [], "op_stack": [], "module": [], "graph": [],
        "shape": [], "call": []})

    def op_sums(self) -> dict[str, int]:
        """Σ duration per expected op (kernels never overlap: = Σ self)."""
        out: dict[str, int] = {}
        for op, start, end in zip(self.kernels["op"], self.kernels["start_ns"], self.kernels["end_ns"]):
            out[op] = out.get(op, 0) + end - start
        return out

    def sums(self, level: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, start, end in zip(self.kernels[level], self.kernels["start_ns"], self.kernels["end_ns"]):
            key = " > ".join(key) if isinstance(key, tuple) else key
            out[key] = out.get(key, 0) + end - start
        return out


HIDDEN = 64


def op_args(op: str, batch: int, layer: int) -> dict:
    """record_shapes args of one cpu op: an `aten::mm` of [batch, HIDDEN] x [HIDDEN, N] (N by layer), its
    `aten::linear` parent with the weight as [N, HIDDEN] and a bias, the rest [batch, HIDDEN*(layer+1)]."""
    n = HIDDEN * (layer + 2)
    if op == "aten::mm":
        return {"Input Dims": [[batch, HIDDEN], [HIDDEN, n]], "Input type": ["c10::BFloat16", "c10::BFloat16"],
                "Concrete Inputs": ["", ""]}
    if op == "aten::linear":
        return {"Input Dims": [[batch, HIDDEN], [n, HIDDEN], [n]],
                "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"], "Concrete Inputs": ["", "", ""]}
    return {"Input Dims": [[batch, HIDDEN * (layer + 1)]], "Input type": ["float"], "Concrete Inputs": [""]}


def shape_truth(op: str, batch: int, layer: int) -> tuple[str, str, str, str]:
    """The shape key of a kernel whose innermost op is `op` (texts as json.dumps writes them)."""
    args = op_args(op, batch, layer)
    return (op, json.dumps(args["Input Dims"]), json.dumps(args["Input type"]), json.dumps(args["Concrete Inputs"]))


def _gemm(batch: int) -> str:
    return "gemm_small_kernel" if batch <= 8 else "gemm_large_kernel"


def _layer_ops(layer: int, batch: int, piecewise: bool) -> list[tuple[str, tuple[str, ...], str, list[str]]]:
    """(op, op stack, module, kernels) of one layer as captured; piecewise graphs leave attention out."""
    base = f"Model_0/Layer_{layer}"
    ops = [("aten::mm", ("aten::linear", "aten::mm"), f"{base}/QKV_0", [_gemm(batch)])]
    if not piecewise:
        ops.append(("my::attention", ("my::attention",), f"{base}/Attention_0", ["attn_fwd", "attn_reduce"]))
    ops += [("aten::mm", ("aten::linear", "aten::mm"), f"{base}/MLP_0", [_gemm(batch)]),
            ("aten::silu", ("aten::silu",), f"{base}/MLP_0/SiLU_0", ["silu_kernel"])]
    return ops


def _graphs(spec: GraphPairSpec, batch: int) -> list[list[tuple]]:
    """The graphs of one batch size, in capture order: each a list of (op, stack, module, kernels, layer)."""
    if spec.layout == "full":
        return [[op + (layer,) for layer in range(spec.layers) for op in _layer_ops(layer, batch, False)]]
    return [[op + (layer,) for op in _layer_ops(layer, batch, True)] for layer in range(spec.layers)]


class _Writer:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.correlation = 1000

    def x(self, cat: str, name: str, start: int, dur: int, pid=_PID, tid=_TID, **args) -> None:
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                 "ts": (start - _BASE_NS) / 1000, "dur": dur / 1000}
        if args:
            event["args"] = args
        self.events.append(event)

    def frames(self, module: str, start: int, dur: int) -> None:
        """nn.Module frames of a module path, outermost first, all over [start, start + dur)."""
        parts = module.split("/")
        for depth, name in enumerate(parts):
            self.x("python_function", f"nn.Module: {name}", start + depth, dur - 2 * depth)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [], "traceEvents": self.events,
                                    "baseTimeNanoseconds": _BASE_NS}))


def build_graph_pair(spec: GraphPairSpec, folder: str | Path) -> GraphTruth:
    folder = Path(folder)
    rng = random.Random(spec.seed)
    captures = []
    if spec.capture:
        for batch in spec.captured_batch_sizes:
            captures.append(str(_write_capture(spec, batch, folder / "capture_traces" / f"bs_{batch}.json")))
        details = [{"file": f"bs_{b}.json", "batch_size": b, "mode": spec.layout.upper()}
                   for b in spec.captured_batch_sizes]
        (folder / "capture_traces" / "execution_details.json").write_text(json.dumps(details))
    truth = GraphTruth(str(folder / "replay.json"), captures, 0)
    w = _Writer()
    t = _BASE_NS + 1_000_000_000
    device_free = t
    for step, replay_batch in enumerate(spec.replay_batch_sizes, 1):
        batch = min(b for b in spec.captured_batch_sizes if b >= replay_batch)
        step_start = t
        t += 1000
        body = []          # (kind, payload) in order: ("graph", graph) or ("eager", layer)
        for index, graph in enumerate(_graphs(spec, batch)):
            body.append(("graph", (index, graph)))
            if spec.layout == "piecewise":
                body.append(("eager", index))
        body.append(("argmax", None))
        for kind, payload in body:
            if kind == "graph":
                index, graph = payload
                w.correlation += 1
                launch = w.correlation
                w.x("python_function", REPLAY_FRAME, t, 20_000)
                w.x("cuda_runtime", "cudaGraphLaunch", t + 1000, 5000, correlation=launch)
                nodes = [(op, stack, module, name, (step, index, j), shape_truth(stack[-1], batch, layer))
                         for j, (op, stack, module, names, layer) in enumerate(graph) for name in names]
                order = list(range(len(nodes)))
                if spec.node_ids:      # pairwise swapped in time: only the node ids tell the capture's order
                    for i in range(0, len(order) - 1, 2):
                        order[i], order[i + 1] = order[i + 1], order[i]
                start = max(device_free, t + 8000)
                for k in order:
                    op, stack, module, name, call, shape = nodes[k]
                    dur = rng.randrange(5_000, 50_000)
                    args = {"correlation": launch, "stream": _STREAM + k % 2, "device": _DEVICE}
                    if spec.node_ids:
                        args.update({"graph id": 7 + index, "graph node id": 100 * index + k + 1})
                    w.x("kernel", name, start, dur, pid=_DEVICE, tid=_STREAM + k % 2, **args)
                    if spec.capture:
                        _record(truth, name, start, dur, op, stack, module, f"{batch}/{index}", shape, call)
                    else:       # per launch: the label of the op level, no args
                        _record(truth, name, start, dur, FALLBACK_OP, (FALLBACK_OP,), "", "",
                                (FALLBACK_OP, "", "", ""), (step, index))
                    start += dur + 1000
                device_free = start
                t += 21_000
            else:
                layer = payload
                op, module = ("my::attention", f"Model_0/Layer_{layer}/Attention_0") if kind == "eager" \
                    else ("aten::argmax", "Model_0")
                names = ["attn_fwd", "attn_reduce"] if kind == "eager" else ["argmax_kernel"]
                w.frames(module, t, 30_000)
                args = op_args(op, replay_batch, layer or 0)
                w.x("cpu_op", op, t + 100, 20_000, **args)
                shape = shape_truth(op, replay_batch, layer or 0)
                cursor = t + 500
                for name in names:
                    w.correlation += 1
                    w.x("cuda_runtime", "cudaLaunchKernel", cursor, 2000, correlation=w.correlation)
                    start = max(device_free, cursor + 3000)
                    dur = rng.randrange(5_000, 50_000)
                    w.x("kernel", name, start, dur, pid=_DEVICE, tid=_STREAM, correlation=w.correlation,
                        stream=_STREAM, device=_DEVICE)
                    _record(truth, name, start, dur, op, (op,), module, "", shape, (step, "eager", t))
                    device_free = start + dur + 1000
                    cursor += 3000
                t += 31_000
        t = max(t, device_free) + 1000
        w.x("user_annotation", f"step[DECODE bs={replay_batch}]", step_start + 1, t - step_start - 2)
        w.x("user_annotation", f"ProfilerStep#{step}", step_start, t - step_start)
        t += 10_000
    truth.busy_ns = sum(e - s for s, e in zip(truth.kernels["start_ns"], truth.kernels["end_ns"]))
    w.write(folder / "replay.json")
    return truth


def _record(truth: GraphTruth, name, start, dur, op, stack, module, graph, shape, call) -> None:
    k = truth.kernels
    for key, value in (("name", name), ("start_ns", start), ("end_ns", start + dur), ("op", op),
                       ("op_stack", stack), ("module", module), ("graph", graph), ("shape", shape),
                       ("call", call)):
        k[key].append(value)


def _write_capture(spec: GraphPairSpec, batch: int, path: Path) -> Path:
    """One capture file: every graph of `batch`, each launch under its op stack and module frames."""
    w = _Writer()
    t = _BASE_NS + 500_000_000
    start_all = t
    t += 1000
    for graph in _graphs(spec, batch):
        w.correlation += 1
        w.x("cuda_runtime", "cudaStreamBeginCapture", t, 1000, correlation=w.correlation)
        t += 2000
        for op, stack, module, names, layer in graph:
            length = 5000 * len(names) + 4000
            w.frames(module, t, length + 40)
            for depth, name in enumerate(stack):
                w.x("cpu_op", name, t + 20 + depth, length - 2 * depth, **op_args(name, batch, layer))
            cursor = t + 100
            for name in names:
                w.correlation += 1
                args = {"correlation": w.correlation}
                if spec.kernel_names:
                    args["kernel"] = name
                w.x("cuda_runtime", "cudaLaunchKernel", cursor, 2000, **args)
                cursor += 5000
            t += length + 1000
        w.correlation += 1
        w.x("cuda_runtime", "cudaStreamEndCapture", t, 1000, correlation=w.correlation)
        t += 2000
    w.x("user_annotation", f"capture_{batch}", start_all + 1, t - start_all)
    w.x("user_annotation", "ProfilerStep#1", start_all, t - start_all + 2)
    w.write(path)
    return path
