"""Typed msgspec views of one trace event: only the fields traceattr reads, everything else is skipped.

Two variants: float timestamps (eras A, C, relative) and Decimal timestamps (era B, whose absolute µs with
three decimals do not fit in a float64; msgspec decodes a Decimal field straight from the JSON text).
Structs are `gc=False`: they hold no cycles and millions of them must not trigger collections.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import msgspec
from msgspec import Raw, Struct, field

# Absent integers are -1 (schema.NO_INT); `Python parent id` may be JSON null on root frames.


class Args(Struct, gc=False, frozen=True):   # frozen: one shared instance is the default
    correlation: int = -1
    external_id: int = field(default=-1, name="External id")
    bytes: int = -1
    collective: str = field(default="", name="Collective name")
    sequence_number: int = field(default=-1, name="Sequence number")
    fwd_thread_id: int = field(default=-1, name="Fwd thread id")
    python_id: int = field(default=-1, name="Python id")
    python_parent_id: int | None = field(default=-1, name="Python parent id")
    python_module_id: int = field(default=-1, name="Python module id")
    # collective facts (kineto-format.md 2.3), on NCCL kernels and their record_param_comms op
    pg_name: str = field(default="", name="Process Group Name")
    pg_id: int = field(default=-1, name="Process Group ID")        # early 2024: an int instead of the name
    pg_ranks: str = field(default="", name="Process Group Ranks")
    seq: int = field(default=-1, name="Seq")
    in_nelems: int = field(default=-1, name="In msg nelems")
    out_nelems: int = field(default=-1, name="Out msg nelems")
    dtype: str = ""
    src_rank: int = field(default=-1, name="Src Rank")
    dst_rank: int = field(default=-1, name="Dst Rank")
    group_size: int = field(default=-1, name="Group size")     # torch versions without Seq write it too
    # cuda_sync markers: the event record a `Stream Wait Event` / `Event Sync` waits on
    wait_on_stream: int = -1
    wait_on_correlation: int = field(default=-1, name="wait_on_cuda_event_record_corr_id")
    # record_shapes on cpu ops (kineto-format.md 2.3): any JSON value, kept as its raw text (shapes.py reads it)
    input_dims: Raw = field(default=Raw(), name="Input Dims")
    input_types: Raw = field(default=Raw(), name="Input type")
    concrete_inputs: Raw = field(default=Raw(), name="Concrete Inputs")
    # CUDA/HIP graphs (docs/inference.md): a launch's kernel name (runtime calls recorded during capture) and
    # the graph node a replayed kernel ran as (CUPTI, 2026 writers)
    kernel: str = ""
    graph_id: int = field(default=-1, name="graph id")
    graph_node_id: int = field(default=-1, name="graph node id")


NO_ARGS = Args()


class Event(Struct, gc=False):
    ph: str
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float | None = None
    dur: float | None = None
    args: Args = NO_ARGS


class DecimalEvent(Event, gc=False):
    """Era B: the same fields, with ts/dur decoded exactly from the JSON text."""
    ts: Decimal | None = None
    dur: Decimal | None = None


RAW_ARGS = ("input_dims", "input_types", "concrete_inputs")   # typed Raw: any JSON value is theirs

# The same args typed Any (any JSON value; the raw ones stay Raw), derived from Args so the two never drift
# apart: only for a chunk whose strict decode met an arg of another type.
LenientArgs = msgspec.defstruct(
    "LenientArgs",
    [(name, Raw if name in RAW_ARGS else Any, field(default=default, name=encoded)) for name, encoded, default in
     zip(Args.__struct_fields__, Args.__struct_encode_fields__, Args.__struct_defaults__)],
    frozen=True, gc=False)


class LenientEvent(Event, gc=False):
    args: LenientArgs = LenientArgs()


class LenientDecimalEvent(DecimalEvent, gc=False):
    args: LenientArgs = LenientArgs()


AT_INDEX = re.compile(r"`\$\[(\d+)\]")      # msgspec's position in the chunk: `$[i]
_STR_ARGS = ("collective", "pg_name", "pg_ranks", "dtype", "kernel")
_INT_ARGS = [name for name in Args.__struct_fields__ if name not in _STR_ARGS + RAW_ARGS]
_INT64 = range(-(2**63), 2**63)
# ROCm's runtime calls (hipMemcpyWithStream, via roctracer) spell their `bytes` as a decimal string ("bytes":
# "1"): a legitimate spelling of the number, read as it (every TraceLens MI300 trace has one)
_DECIMAL_TEXT_ARGS = ("bytes",)
_DECIMAL = re.compile(r"[0-9]{1,18}")


class EventsDecoder:
    """Typed decode of a JSON array of events (`decode(bytes) -> list`).

    An arg of an unexpected type (a string or float where an integer id belongs) does not refuse the whole
    file: that chunk is decoded again leniently and each such arg reads as absent (-1, or "" for the
    string args). `odd_args` counts them and `first_odd` says where the first was, for a note.
    Wrong types in `ph`, `ts` or `dur` still raise: those are the numbers."""

    def __init__(self, exact_decimal: bool) -> None:
        self._strict = msgspec.json.Decoder(list[DecimalEvent] if exact_decimal else list[Event])
        self._lenient = msgspec.json.Decoder(list[LenientDecimalEvent] if exact_decimal else list[LenientEvent])
        self.odd_args = 0
        self.first_odd = ""

    def decode(self, data, first_index: int = 0) -> list:
        """The events of one JSON array whose first element is event `first_index` of the file."""
        if not isinstance(data, bytes):
            # a Raw arg holds the buffer it was decoded from: a copy, so the splitter's view is let go
            data = bytes(data)
        try:
            return self._strict.decode(data)
        except msgspec.ValidationError as exc:
            if ".args." not in str(exc):
                raise
            events = self._lenient.decode(data)
            self.first_odd = self.first_odd or AT_INDEX.sub(
                lambda m: f"`traceEvents[{int(m.group(1)) + first_index}]", str(exc))
            return [msgspec.structs.replace(event, args=self._strict_args(event.args)) for event in events]

    def _strict_args(self, args: LenientArgs) -> Args:
        values = {}
        for name in _INT_ARGS:
            value = getattr(args, name)
            if name in _DECIMAL_TEXT_ARGS and type(value) is str and _DECIMAL.fullmatch(value):
                value = int(value)
            ok = (type(value) is int and value in _INT64) or (value is None and name == "python_parent_id")
            values[name] = value if ok else -1
            self.odd_args += not ok
        for name in _STR_ARGS:
            value = getattr(args, name)
            values[name] = value if type(value) is str else ""
            self.odd_args += values[name] is not value
        for name in RAW_ARGS:
            values[name] = getattr(args, name)
        return Args(**values)
