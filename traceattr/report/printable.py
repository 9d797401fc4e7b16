"""printable: any text from a trace made safe to show in a terminal, a markdown cell or an SVG label.

Control characters (C0, DEL, C1: ANSI escape sequences start with ESC) and undecodable bytes (surrogates
left by a lenient UTF-8 decode) are shown as visible escapes (`\\x1b`, `\\n`) instead of acting on the
terminal. Markup is left as text: the terminal renderer never interprets markup and HTML escapes on its own.
"""

from __future__ import annotations

import re

INVISIBLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text) -> str:
    """`text` with every control or undecodable character replaced by a visible escape."""
    text = str(text)
    if not INVISIBLE.search(text):
        return text
    return INVISIBLE.sub(_escape, text)


def _escape(match: re.Match) -> str:
    char = match.group(0)
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:          # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
