"""printable: any text from a trace made safe to show in a terminal, a markdown cell or an SVG label.

Control characters (C0, DEL, C1: ANSI escape sequences start with ESC) and undecodable bytes (surrogates
left by a lenient UTF-8 decode) are shown as visible escapes (`\\x1b`, `\\n`) instead of acting on the
terminal. Markup is left as text: the terminal renderer never interprets markup and HTML escapes on its own.
"""

from __future__ import annotations

import re

# C0, DEL, C1, lone surrogates, and every format (Cf) and line/paragraph separator character of Unicode 14
# (Python 3.11's unicodedata; a test checks this list against the running one): zero-width, bidi controls
# (U+061C, U+200E/F, U+202A-E, U+2066-9), the BOM, word joiners, tag characters, soft hyphen
INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text) -> str:
    """`text` with every control or undecodable character replaced by a visible escape."""
    text = str(text)
    if not INVISIBLE.search(text):
        return text
    return INVISIBLE.sub(_escape, text)


def printable_lines(text: str) -> str:
    """Rendered output (csv, json) for a terminal: each line printable, the line breaks kept. A file or a
    pipe gets the exact text instead: a kernel name's control characters act only on a terminal."""
    return "\n".join(printable(line) for line in text.split("\n"))


def _escape(match: re.Match) -> str:
    char = match.group(0)
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:          # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


NOTE_CHARS = 1000       # a note or header fact longer than this is cut (one holds a whole kernel name)


def clipped(text: str, limit: int = NOTE_CHARS) -> str:
    """`text` cut to `limit` characters, saying how much was left out: a note holding an 8 MiB kernel
    name took minutes to wrap into the table's header box, and filled the terminal."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"
