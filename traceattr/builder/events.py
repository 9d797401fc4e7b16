"""The timeline of one rank: host ops, launches and device activities, step by step.

Events come out as small neutral tuples with absolute int64 ns times; writer.py renders them per
era and layout. Every device activity is recorded in the TraceTruth at the moment it is created, from
the generator's own state (the op stack, module frames, annotations), never by reading the file back.

Neutral events:
    ("X", cat, name, pid, tid, start_ns, dur_ns, args)     args: rendered inner JSON or None
    ("i", cat, name, pid, tid, ts_ns, scope, args)         cat may be None (global markers)
    ("s" | "f", cat, flow_id, pid, tid, ts_ns)
    ("M", name, pid, tid, ts_ns, args)
pid/tid are already JSON text (ints as digits, strings quoted); names are plain strings.
"""

from __future__ import annotations

import math
import random
from typing import Iterator

from traceattr.builder import kinds
from traceattr.builder.spec import TraceSpec
from traceattr.builder.truth import TraceTruth

CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaMemcpy": 31, "cudaMemsetAsync": 51, "cudaGraphLaunch": 311,
        "cudaStreamSynchronize": 131}
TIMELINE_ORIGIN_US = 5_131_142_963_427   # relative µs of the first event, like the torch 2.13 samples


def _contains(name: str, keys) -> bool:
    return any(key in name for key in keys)


class RankTimeline:
    """Generates one rank's events. Call `header_events()`, then `step(n)` per step, then `footer_events()`."""

    def __init__(self, spec: TraceSpec, rank: int, truth: TraceTruth,
                 collective_ends: list[int] | None = None) -> None:
        self.spec, self.rank, self.truth = spec, rank, truth
        # coupled collectives (writer.write_trace_set): where each allreduce ends, and where each arrived
        # with the transfer it drew (start, drawn duration), for the coupling's next round
        self.collective_ends = collective_ends
        self.collective_arrivals: list[tuple[int, int]] = []
        self.q = 1000 if spec.era == "A" else 1          # era A writes whole µs: keep every time µs-aligned
        self.pid = 4000 + 37 * rank
        self.tid = self.pid
        self.pid_s = str(self.pid)
        self.devices = [(rank * spec.devices_per_rank + i) % spec.visible_devices
                        for i in range(spec.devices_per_rank)]
        streams = spec.streams
        self.compute_stream = streams[0]
        self.nccl_stream = streams[1] if len(streams) > 1 else streams[0]
        self.copy_stream = streams[2] if len(streams) > 2 else self.nccl_stream
        self.side_streams = streams[3:]
        self.free = {(d, s): 0 for d in self.devices for s in streams}
        # uncoupled ranks start 1 ms apart, which a reader sees as rank r's clock 1 ms * r ahead
        shift = 0 if spec.coupled_collectives else 1_000_003 * rank
        self.h = self._align(spec.base_time_ns + TIMELINE_ORIGIN_US * 1000 + 709 + shift)
        self.first_ns = self.h - self._align(300_000)
        self.correlation = 57_000 + 1000 * rank
        self.external_id = 0
        self.ev_idx = 0
        self.python_id = 0
        self.flow_id = 0
        self.sequence = 40
        self.op_count = 0
        self.dropped_this_step = 0
        self.scale = spec.rank_scale.get(rank, 1.0)
        self.rng = random.Random(spec.seed * 1_000_003 + rank)
        self.step_factor = 1.0
        # links of the code that is running now (the generator's own state, the source of the truth)
        self.op_stack: list[str] = []
        self.module_path: list[str] = []
        self.annotation: list[str] = []
        self.step_name = ""
        self.module_counts: dict[str, int] = {}
        self.seq_module: dict[int, str] = {}     # forward Sequence number -> its module path
        self.pending_flows: dict[int, int] = {}  # forward Sequence number -> fwdbwd flow id
        self._current_module = ""
        self._device_spans: list[tuple[int, int, int]] = []
        self.host: list = []
        self.frames: list = []
        self.device_events: list = []
        self.last_end = self.h

    # --- small helpers ----------------------------------------------------------------------
    def _align(self, ns: int) -> int:
        return ns // self.q * self.q

    def _len(self, mean_ns: int) -> int:
        """A host-side length around mean_ns (±30%), at least one quantum."""
        return max(self.q, self._align(int(mean_ns * (0.7 + 0.6 * self.rng.random()))))

    def _next_external(self) -> int:
        self.external_id += 1
        return self.external_id

    def _next_ev_idx(self) -> int:
        self.ev_idx += 1
        return self.ev_idx - 1

    def _open(self, cat: str, name: str, extra: str = "", seq: int | None = None) -> tuple[int, int, int]:
        """Start a host range at the cursor; returns (slot, start, external id) for `_close`."""
        ext = self._next_external()
        slot = len(self.host)
        self.host.append(None)
        start = self.h
        self.h += self._len(2500)
        args = f'"External id": {ext},"Record function id": 0'
        if seq is not None:
            args += f', "Sequence number": {seq}, "Fwd thread id": {1 if "Backward" in name else 0}'
        args += f'{extra}, "Ev Idx": {self._next_ev_idx()}'
        self.host[slot] = (cat, name, args)     # completed with times in _close
        return slot, start, ext

    def _close(self, handle: tuple[int, int, int]) -> None:
        slot, start, _ = handle
        self.h += self._len(1500)
        cat, name, args = self.host[slot]
        self.host[slot] = ("X", cat, name, self.pid_s, str(self.tid), start, self.h - start, args)
        self.last_end = max(self.last_end, self.h)

    def _frame(self, name: str, parent: int | None, module_id: int | None) -> tuple[int, int, int]:
        self.python_id += 1
        pid_text = "null" if parent is None else str(parent)
        args = f'"Python parent id": {pid_text}, "Python id": {self.python_id}'
        if module_id is not None:
            args += f', "Python module id": {module_id}'
        args += f', "Ev Idx": {self._next_ev_idx()}'
        slot = len(self.frames)
        self.frames.append(args)
        start = self.h
        self.h += self._len(3000)
        return slot, start, self.python_id

    def _close_frame(self, handle: tuple[int, int, int], name: str) -> None:
        slot, start, _ = handle
        self.h += self._len(2000)
        self.frames[slot] = ("X", "python_function", name, self.pid_s, str(self.tid), start, self.h - start,
                             self.frames[slot])

    def _kernel_ns(self, name: str, low: int, high: int) -> int:
        ns = kinds.base_duration_ns(name, low, high) * (0.9 + 0.2 * self.rng.random())
        for key, factor in self.spec.kernel_scale.items():
            if key in name:
                ns *= factor
        return max(self.q, self._align(int(ns * self.scale * self.step_factor)))

    # --- launches ------------------------------------------------------------------------------
    def launch(self, name: str, category: str, device: int, stream: int, dur_ns: int, *,
               runtime: str = "cudaLaunchKernel", args: str = "", wait_for: int = 0,
               op_ext: int | None = None, drop_record: bool = False, ends_at: int | None = None) -> int:
        """A runtime call at the host cursor and the device activity it starts (ending at `ends_at` when
        given, else after dur_ns); returns the activity's start."""
        self.correlation += 1
        corr = self.correlation
        rt_start, rt_dur = self.h, self._len(5000)
        start = max(rt_start + self._len(4000), self.free[(device, stream)], wait_for)
        if ends_at is not None:
            dur_ns = max(self.q, ends_at - start)
        end = start + dur_ns
        self.h = rt_start + rt_dur + self._len(1500)
        if _contains(name, self.spec.drop_kernels):
            return start   # gone (random draws above still made, so the rest of the trace stays the same)
        self.free[(device, stream)] = end
        linked = op_ext is not None and not drop_record   # no runtime record, no CPU-op link either
        ext = (f'"External id": {corr}, ' if self.spec.era == "A"
               else f'"External id": {op_ext}, ' if linked else "")
        if not drop_record:
            self.host.append(("X", "cuda_runtime", runtime, self.pid_s, str(self.tid), rt_start, rt_dur,
                              f'{ext}"cbid": {CBID[runtime]}, "correlation": {corr}'))
            self._host_call(runtime, rt_start, rt_dur)
            if self.spec.flows:
                self.host.append(("s", "ac2g", corr, self.pid_s, str(self.tid), rt_start))
        cat = {"memcpy": "gpu_memcpy", "memset": "gpu_memset"}.get(category, "kernel")
        common = f'{ext}"device": {device}, "context": 1, "stream": {stream}, "correlation": {corr}'
        if cat == "kernel":
            body = (f'{ext}"queued": 0, "device": {device}, "context": 1, "stream": {stream}, '
                    f'"correlation": {corr}, "registers per thread": 32, "shared memory": 0, '
                    f'"blocks per SM": 1.600000, "warps per SM": 12.800000, "grid": [216, 1, 1], '
                    f'"block": [256, 1, 1], "est. achieved occupancy %": 50{args}')
        else:
            body = common + args
        self.device_events.append(("X", cat, name, str(device), str(stream), start, dur_ns, body))
        if self.spec.flows:
            self.device_events.append(("f", "ac2g", corr, str(device), str(stream), start))
        self._record(device, stream, name, category, start, end, corr,
                     "" if drop_record else runtime, drop_record)
        return start

    def _host_call(self, name: str, start: int, duration: int) -> None:
        """A runtime call in the truth, with the outermost cpu op open around it ("" none)."""
        self.truth.host_calls.append((name, start, duration, self.op_stack[0] if self.op_stack else ""))

    def _record(self, device, stream, name, category, start, end, corr, launch, dropped) -> None:
        acts = self.truth.activities
        acts["device"].append(device)
        acts["stream"].append(stream)
        acts["name"].append(name)
        acts["category"].append(category)
        acts["start_ns"].append(start)
        acts["end_ns"].append(end)
        acts["correlation"].append(corr)
        acts["launch"].append(launch)
        stack = () if dropped else tuple(self.op_stack)
        acts["op"].append(stack[-1] if stack else "")
        acts["op_stack"].append(stack)
        module = "" if dropped else self._current_module
        acts["module"].append(module)
        acts["annotation"].append("" if dropped or not self.annotation else self.annotation[-1])
        acts["step"].append("" if dropped else self.step_name)
        self.last_end = max(self.last_end, end)
        self._device_spans.append((device, start, end))

    def _module_now(self) -> str:
        return "/".join(self.module_path) if self.spec.with_stack else ""

    # --- one step -----------------------------------------------------------------------------
    def step(self, number: int) -> Iterator[tuple]:
        """All events of ProfilerStep#number: host ops first, then python frames, then device rows."""
        spec, rng = self.spec, self.rng
        self.host, self.frames, self.device_events, self._device_spans = [], [], [], []
        self.step_factor = math.exp(spec.jitter * rng.gauss(0.0, 1.0)) if spec.jitter else 1.0
        self.dropped_this_step = 0
        self.h += self._len(30_000) + self._align(spec.step_pause_ns)
        self.step_name = f"ProfilerStep#{number}"
        self.truth.steps.append(self.step_name)
        step_handle = self._open("user_annotation", self.step_name)
        dev0 = self.devices[0]
        if spec.memcpy:
            self._memcpy(dev0)
        marks = []
        if spec.annotations:
            marks.append(self._annotated("my_forward", self._forward))
        else:
            self._forward()
        if spec.backward:
            if spec.annotations:
                marks.append(self._annotated("my_backward", self._backward))
            else:
                self._backward()
        self._optimizer(dev0)
        if spec.cuda_graph:
            self._graph(dev0)
        for name, dur_ns in spec.add_kernels.items():
            handle = self._op("aten::custom_op")
            self.launch(name, "compute", dev0, self.compute_stream, max(self.q, self._align(dur_ns)),
                        op_ext=handle[2])
            self._end_op(handle)
        if spec.cuda_sync:
            self._sync(dev0)
        else:
            self.h = max([self.h] + [self.free[(d, self.compute_stream)] for d in self.devices])
        self._close(step_handle)
        self.step_name = ""
        for name, ext, first, last in marks:
            self._gpu_annotation(name, ext, first, last)
        yield from self.host
        yield from self.frames
        yield from self.device_events

    def _annotated(self, name: str, body) -> tuple:
        handle = self._open("user_annotation", name)
        self.annotation.append(name)
        first = len(self._device_spans)
        body()
        self.annotation.pop()
        self._close(handle)
        return name, handle[2], first, len(self._device_spans)

    def _gpu_annotation(self, name: str, ext: int, first: int, last: int) -> None:
        spans = [s for s in self._device_spans[first:last] if s[0] == self.devices[0]]
        if not spans:
            return
        pad = self.q          # the writer pads by 1 ns (1 µs when times are whole µs)
        start = min(s[1] for s in spans) - pad
        end = max(s[2] for s in spans) + pad
        self.device_events.append(("X", "gpu_user_annotation", name, str(self.devices[0]),
                                   str(self.compute_stream), start, end - start, f'"External id": {ext}'))
        self.truth.markers["gpu_user_annotation"] = self.truth.markers.get("gpu_user_annotation", 0) + 1

    def _op(self, name: str, seq: int | None = None, extra: str = "") -> tuple[int, int, int]:
        handle = self._open("cpu_op", name, extra, seq)
        self.op_stack.append(name)
        return handle

    def _end_op(self, handle) -> None:
        self.op_stack.pop()
        self._close(handle)

    def _memcpy(self, device: int) -> None:
        outer = self._op("aten::to")
        mid = self._op("aten::_to_copy")
        inner = self._op("aten::copy_")
        self._current_module = ""
        nbytes = 4 * 1024 * 1024
        name = self.spec.memcpy_name or kinds.MEMCPY_NAME
        dur = self._kernel_ns(name, 150_000, 250_000)
        self.launch(name, "memcpy", device, self.copy_stream, dur, runtime=self.spec.memcpy_runtime,
                    op_ext=inner[2],
                    args=f', "bytes": {nbytes}, "memory bandwidth (GB/s)": {nbytes / max(dur, 1):.6f}')
        for handle in (inner, mid, outer):
            self._end_op(handle)

    def _forward(self) -> None:
        spec = self.spec
        with_stack = spec.with_stack
        model = self._frame("nn.Module: Model_0", None, 0) if with_stack else None
        self.module_path = ["Model_0"]
        self.module_counts = {}
        for layer in range(spec.layers):
            cls = spec.module_classes[layer % len(spec.module_classes)]
            index = self.module_counts.get(cls, 0)
            self.module_counts[cls] = index + 1
            module_name = f"{cls}_{index}"
            device = self.devices[layer % len(self.devices)]
            frame = self._frame(f"nn.Module: {module_name}", model[2], layer + 1) if with_stack else None
            self.module_path.append(module_name)
            self._current_module = self._module_now()
            kind = kinds.op_kind(cls)
            for _ in range(spec.ops_per_module):
                self._forward_op(kind, device)
            self.module_path.pop()
            if with_stack:
                self._close_frame(frame, f"nn.Module: {module_name}")
        self.module_path = []
        self._current_module = ""
        if with_stack:
            self._close_frame(model, "nn.Module: Model_0")

    def _stream_for_op(self) -> int:
        self.op_count += 1
        if self.side_streams and self.op_count % 3 == 0:
            return self.side_streams[(self.op_count // 3) % len(self.side_streams)]
        return self.compute_stream

    def _forward_op(self, kind: kinds.OpKind, device: int) -> None:
        self.sequence += 1
        seq = self.sequence
        self.seq_module[seq] = self._current_module
        outer = self._op(kind.outer, seq, self._shapes(kind.outer))
        inner = self._op(kind.inner, seq, self._shapes(kind.inner))
        if self.spec.flows and self.spec.backward:
            self.flow_id += 1
            self.host.append(("s", "fwdbwd", self.flow_id, self.pid_s, str(self.tid), inner[1]))
            self.pending_flows[seq] = self.flow_id
        if self.spec.profile_memory:
            self._memory(device)
        stream = self._stream_for_op()
        self._launch_kernels(kind.kernels, device, stream, inner[2])
        self._end_op(inner)
        self._end_op(outer)

    def _shapes(self, op: str) -> str:
        """The record_shapes args of a forward op (TraceSpec.op_shapes), as text to append to its args."""
        planted = self.spec.op_shapes.get(op)
        if planted is None:
            return ', "Input Dims": [[64, 1024], [1024, 1024], [1024]], "Input type": ["float", "float", "float"]'
        keys = ("Input Dims", "Input type", "Concrete Inputs")
        return "".join(f', "{key}": {text}' for key, text in zip(keys, planted) if text)

    def _launch_kernels(self, names, device: int, stream: int, op_ext: int) -> None:
        for j in range(self.spec.kernels_per_op):
            name = names[j % len(names)]
            drop = self.dropped_this_step < self.spec.dropped_records and j == self.spec.kernels_per_op - 1
            self.dropped_this_step += drop
            self.launch(name, "compute", device, stream, self._kernel_ns(name, 8_000, 90_000),
                        op_ext=op_ext, drop_record=drop)

    def _memory(self, device: int) -> None:
        nbytes = 262_144
        args = (f'"Total Reserved": 2097152, "Total Allocated": {nbytes * 3}, "Bytes": {nbytes}, '
                f'"Device Id": {device}, "Device Type": 1, "Addr": {139_900_000_000_000 + self.ev_idx * 4096}, '
                f'"finished": false, "Ev Idx": {self._next_ev_idx()}')
        self.host.append(("i", "cpu_instant_event", "[memory]", self.pid_s, str(self.tid), self.h, "t", args))

    def _backward(self) -> None:
        spec = self.spec
        seqs = sorted(self.seq_module)[-spec.layers * spec.ops_per_module:]
        layer_of = {seq: i // spec.ops_per_module for i, seq in enumerate(seqs)}
        half = len(seqs) // 2
        for i, seq in enumerate(reversed(seqs)):
            layer = layer_of[seq]
            cls = spec.module_classes[layer % len(spec.module_classes)]
            kind = kinds.op_kind(cls)
            device = self.devices[layer % len(self.devices)]
            self._current_module = self.seq_module[seq]
            node = self._op(f"autograd::engine::evaluate_function: {kind.backward}", seq)
            if spec.flows:
                flow = self.pending_flows.pop(seq, None)
                if flow is not None:
                    self.host.append(("f", "fwdbwd", flow, self.pid_s, str(self.tid), node[1]))
            mid = self._op(kind.backward, seq)
            inner = self._op(kind.backward_inner)
            self._launch_kernels(kind.backward_kernels, device, self._stream_for_op(), inner[2])
            self._end_op(inner)
            self._end_op(mid)
            self._end_op(node)
            if spec.collective and i == half:
                self._collective()
        self._current_module = ""
        self.seq_module.clear()

    def _collective(self) -> None:
        device = self.devices[0]
        self._current_module = ""
        comms = (', "Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576, '
                 f'"Group size": {self.spec.world_size}, "dtype": "Float", "In split size": "[]", '
                 '"Out split size": "[]", "Process Group Name": "0", "Process Group Description": "default_pg", '
                 f'"Process Group Ranks": "{list(range(self.spec.world_size))}"')
        outer = self._op("c10d::allreduce_")
        inner = self._op("record_param_comms", extra=comms)
        ready = self.free[(device, self.compute_stream)]     # NCCL waits for the gradients it reduces
        transfer_ns = self._kernel_ns(kinds.NCCL_KERNEL, 150_000, 400_000)
        index = len(self.collective_arrivals)
        ends_at = self.collective_ends[index] if self.collective_ends is not None else None
        start = self.launch(kinds.NCCL_KERNEL, "communication", device, self.nccl_stream, transfer_ns,
                            args=comms, wait_for=ready, op_ext=inner[2], ends_at=ends_at)
        self.collective_arrivals.append((start, transfer_ns))
        self._end_op(inner)
        self._end_op(outer)

    def _optimizer(self, device: int) -> None:
        handle = self._open("user_annotation", "Optimizer.step#SGD.step")
        self.annotation.append("Optimizer.step#SGD.step")
        op = self._op("aten::_foreach_add_")
        # coupled ranks (DDP): the update waits for the reduced gradients, so the step ends after the allreduce
        reduced = self.free[(device, self.nccl_stream)] if self.spec.coupled_collectives else 0
        self.launch(kinds.OPTIMIZER_KERNEL, "compute", device, self.compute_stream,
                    self._kernel_ns(kinds.OPTIMIZER_KERNEL, 20_000, 60_000), op_ext=op[2], wait_for=reduced)
        self._end_op(op)
        if self.spec.memset:
            op = self._op("aten::zero_")
            self.launch(kinds.MEMSET_NAME, "memset", device, self.compute_stream,
                        self._kernel_ns(kinds.MEMSET_NAME, 2_000, 6_000), runtime="cudaMemsetAsync",
                        op_ext=op[2], args=', "bytes": 1048576, "memory bandwidth (GB/s)": 350.000000')
            self._end_op(op)
        self.annotation.pop()
        self._close(handle)

    def _graph(self, device: int) -> None:
        """cudaGraphLaunch: one correlation for several kernels, and no cpu_op around it: no capture trace,
        so its kernels go to the launch as `<graph replay: cuda_graph_replay>` (its innermost range)."""
        handle = self._open("user_annotation", "cuda_graph_replay")
        self.annotation.append("cuda_graph_replay")
        saved_stack, self.op_stack = self.op_stack, ["<graph replay: cuda_graph_replay>"]
        self.correlation += 1
        corr = self.correlation
        rt_start, rt_dur = self.h, self._len(12_000)
        ext = f'"External id": {corr}, ' if self.spec.era == "A" else ""
        self.host.append(("X", "cuda_runtime", "cudaGraphLaunch", self.pid_s, str(self.tid), rt_start, rt_dur,
                          f'{ext}"cbid": {CBID["cudaGraphLaunch"]}, "correlation": {corr}'))
        if self.spec.flows:
            self.host.append(("s", "ac2g", corr, self.pid_s, str(self.tid), rt_start))
        start = max(rt_start + self._len(5000), self.free[(device, self.compute_stream)])
        for i in range(self.spec.graph_kernels):
            name = kinds.GRAPH_KERNEL.format(i=i)
            dur = self._kernel_ns(name, 5_000, 30_000)
            self.device_events.append((
                "X", "kernel", name, str(device), str(self.compute_stream), start, dur,
                f'{ext}"queued": 0, "device": {device}, "context": 1, "stream": {self.compute_stream}, '
                f'"correlation": {corr}, "registers per thread": 32, "shared memory": 0, "grid": [64, 1, 1], '
                f'"block": [128, 1, 1], "graph id": 1, "graph node id": {i + 1}'))
            if self.spec.flows:
                self.device_events.append(("f", "ac2g", corr, str(device), str(self.compute_stream), start))
            self._current_module = ""
            self._record(device, self.compute_stream, name, "compute", start, start + dur, corr,
                         "cudaGraphLaunch", False)
            start += dur + self.q
        self.free[(device, self.compute_stream)] = start - self.q
        self.h = rt_start + rt_dur + self._len(2000)
        self.op_stack = saved_stack
        self.annotation.pop()
        self._close(handle)

    def _sync(self, device: int) -> None:
        """cudaStreamSynchronize: the host waits; kineto also writes a `Stream Sync` row (not busy)."""
        self.correlation += 1
        corr = self.correlation
        start = self.h
        done = max(self.free[(d, self.compute_stream)] for d in self.devices)
        end = max(start + self._len(3000), self._align(done) + self.q)
        ext = f'"External id": {corr}, ' if self.spec.era == "A" else ""
        self.host.append(("X", "cuda_runtime", "cudaStreamSynchronize", self.pid_s, str(self.tid), start,
                          end - start, f'{ext}"cbid": {CBID["cudaStreamSynchronize"]}, "correlation": {corr}'))
        self.device_events.append((
            "X", "cuda_sync", "Stream Sync", str(device), str(self.compute_stream), start, end - start,
            f'"cuda_sync_kind": "Stream Sync", "stream": {self.compute_stream}, "correlation": {corr}, '
            f'"device": {device}, "context": 1'))
        self.truth.markers["cuda_sync"] = self.truth.markers.get("cuda_sync", 0) + 1
        self._host_call("cudaStreamSynchronize", start, end - start)
        self.h = end + self._len(2000)

    def carried_events(self) -> list[tuple]:
        """spec.carried_in kernels per device launched before the window: queued on the compute stream
        from 50 µs before the cursor (the first host event), back to back, so all but the first run inside
        the window and hold up its first launch; correlations below every recorded one, no runtime record."""
        rows = []
        for index, device in enumerate(self.devices):
            start = self.h - self._align(50_000)
            for i in range(self.spec.carried_in):
                corr = 57_000 + 1000 * self.rank - (index + 1) * self.spec.carried_in + i - 1
                dur = self._kernel_ns("ampere_sgemm_128x64_tn", 15_000, 25_000)
                rows.append(("X", "kernel", "ampere_sgemm_128x64_tn", str(device), str(self.compute_stream), start,
                             dur, f'"queued": 0, "device": {device}, "context": 1, "stream": {self.compute_stream}, '
                                  f'"correlation": {corr}, "grid": [216, 1, 1], "block": [256, 1, 1]'))
                self._record(device, self.compute_stream, "ampere_sgemm_128x64_tn", "compute", start, start + dur,
                             corr, "", True)
                self.truth.carried_in.append(corr)
                start += dur
            self.free[(device, self.compute_stream)] = start
        return rows

    # --- file-level rows -------------------------------------------------------------------------
    def metadata_events(self) -> list[tuple]:
        """`M` rows: the CPU process and thread, every visible GPU and the rank's streams."""
        ts = self.first_ns
        rows = [("M", "process_name", self.pid_s, "0", ts, '"name": "python3"'),
                ("M", "process_labels", self.pid_s, "0", ts, '"labels": "CPU"'),
                ("M", "process_sort_index", self.pid_s, "0", ts, f'"sort_index": {self.pid}'),
                ("M", "thread_name", self.pid_s, str(self.tid), ts, f'"name": "thread {self.tid} (python3)"'),
                ("M", "thread_sort_index", self.pid_s, str(self.tid), ts, f'"sort_index": {self.tid}')]
        for device in range(self.spec.visible_devices):
            rows += [("M", "process_name", str(device), "0", ts, '"name": "python3"'),
                     ("M", "process_labels", str(device), "0", ts, f'"labels": "GPU {device}"'),
                     ("M", "process_sort_index", str(device), "0", ts, f'"sort_index": {16777216 + device}')]
        for device in self.devices:
            for stream in self.spec.streams:
                rows += [("M", "thread_name", str(device), str(stream), ts, f'"name": "stream {stream} "'),
                         ("M", "thread_sort_index", str(device), str(stream), ts, f'"sort_index": {stream}')]
        return rows

    def footer_events(self) -> list[tuple]:
        """The `Trace` span and the two global instants torch writes last."""
        end = max(self.last_end, self.h) + self._len(5000)
        start = self.first_ns
        return [("X", "Trace", "PyTorch Profiler (0)", '"Spans"', '"PyTorch Profiler"', start, end - start,
                 '"Op count": 0'),
                ("M", "process_sort_index", '"Spans"', "0", start, '"sort_index": 536870912'),
                ("i", None, "Iteration Start: PyTorch Profiler", '"Traces"', '"Trace PyTorch Profiler"', start,
                 "g", None),
                ("i", None, "Record Window End", '""', '""', end, "g", None)]
