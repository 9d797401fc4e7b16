"""The record_shapes args of cpu ops (`Input Dims`, `Input type`, `Concrete Inputs`) as compact JSON text.

Both decoders capture each value's raw JSON text (msgspec.Raw; the C scanner's raw span), intern it, and
turn each distinct raw text into one canonical text here, once: pretty-printed traces write one number a
line, so the raw text of `[[4, 3, 224, 224]]` is 60 bytes and the canonical one 18. The canonical text is
Python's json.dumps of the value (`[[4, 3, 224, 224], [768], []]`), the form TraceLens prints too, so the
two join. A raw text over MAX_RAW_BYTES (a forged 20 MB shape list) is absent ("") in both decoders.
"""

from __future__ import annotations

import json

import numpy as np

from traceattr import schema as S
from traceattr.io.codes import Interner, lookup

SHAPE_COLUMNS = (S.INPUT_DIMS, S.INPUT_TYPES, S.CONCRETE_INPUTS)
# Pretty-printed `Input Dims` take ~16 bytes a number: 64 KiB holds a cat of ~1000 4-d tensors.
MAX_RAW_BYTES = 1 << 16
# the canonical text of a raw text within the limit: json.dumps adds at most a space per ',' or ':'
MAX_TEXT_CHARS = 2 * MAX_RAW_BYTES


def canonical(raw: str | bytes) -> str:
    """The compact JSON text of one raw JSON value ("" when empty or over MAX_RAW_BYTES). The raw text was
    validated as JSON by the decoder that captured it."""
    if not raw or len(raw) > MAX_RAW_BYTES:
        return ""
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False)
    except (ValueError, RecursionError):   # cannot happen on validated JSON; absent rather than a traceback
        return ""


class RawTexts:
    """Raw JSON texts -> codes of their canonical texts (code 0: "", absent). `add` takes a raw text as
    str or bytes (the scanner hands str, msgspec bytes); each distinct raw text is canonicalized once."""

    def __init__(self) -> None:
        self.texts = Interner("")
        self._raw: dict[str | bytes, int] = {}

    def add(self, raw: str | bytes) -> int:
        code = self._raw.get(raw)
        if code is None:
            code = self._raw[raw] = self.texts.add(canonical(raw))
        return code

    def codes(self, getter, items: list) -> np.ndarray:
        """Codes of `getter(item)` (a msgspec.Raw) for every item."""
        return lookup(self._raw, self.add, lambda item: bytes(getter(item)), items, np.int32)
