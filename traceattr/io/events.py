"""Typed msgspec views of one trace event: only the fields traceattr reads, everything else is skipped.

Two variants: float timestamps (eras A, C, relative) and Decimal timestamps (era B, whose absolute µs with
three decimals do not fit in a float64; msgspec decodes a Decimal field straight from the JSON text).
Structs are `gc=False`: they hold no cycles and millions of them must not trigger collections.
"""

from __future__ import annotations

from decimal import Decimal

import msgspec
from msgspec import Struct, field

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


def events_decoder(exact_decimal: bool) -> msgspec.json.Decoder:
    """A decoder for a JSON array of events (one chunk of `traceEvents`)."""
    return msgspec.json.Decoder(list[DecimalEvent] if exact_decimal else list[Event])
