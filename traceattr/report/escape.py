"""Make text from traces safe to print: every renderer and every message calls one of these.

Kernel names, file names and notes come from files a user may not have written. Printed raw, an ESC or
OSC sequence can clear a terminal or set its title, a `\\r` can overwrite what was printed, a newline can
forge lines or markdown headings, and `<script>` or `|` can break a markdown table or inject HTML.

* `for_terminal(text)` (= `report.printable.printable`): control characters (C0, DEL, C1, the Unicode
  line/paragraph separators, zero-width and bidirectional controls, undecodable bytes) shown as visible
  escapes: `\\x1b`, `\\r`, `\\n`, `\\t`, `\\u202e`. The text is otherwise unchanged, so a name stays
  searchable. Use it for table cells, titles, notes and stderr lines.
* `for_markdown(text)`: `for_terminal`, then a backslash before every character that markdown would treat
  as syntax there (CommonMark allows a backslash before any ASCII punctuation) and `&lt;` `&gt;` `&amp;` for
  HTML's, so a cell or a note renders as the literal text; `kernel_name` and `ProfilerStep#4` stay as they are. Use it
  for every cell, note, title and list item written as markdown.
* `for_html(text)`: `for_terminal`, then HTML's `&` `<` `>` `"` `'` as entities (quote=True: safe inside an
  attribute value too). `for_tooltip(text)`: the same, cut to TOOLTIP_CHARS, for a `title` attribute or an
  SVG `<title>` holding a whole name that the page shows shortened.
"""

from __future__ import annotations

import html
import re

from traceattr.report.printable import printable as for_terminal   # one escaper of control characters

# emphasis, code, links/images ([ ]: a `(` after an escaped `]` is plain), HTML and entities, tables,
# strikethrough, math; `_` only where it can open or close emphasis (not inside a word: kernel_name), `#` and
# `@` only where they start a word (a heading, GitHub's #123 and @user; not ProfilerStep#4)
_MARKDOWN_SYNTAX = re.compile(r"[\\`*\[\]|~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|(?<!\S)[#@]")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}     # entities: inline HTML never starts
# GitHub's autolinks (`https://...`, `www....`) start from an unescaped `:` or `www.`: a backslash there keeps
# them text (e-mail addresses are linked after parsing, whatever is escaped; they can only be mailto: links)
_AUTOLINK = re.compile(r":(?=//)|(?<![A-Za-z0-9])(?i:www)\.")


def for_markdown(text: object) -> str:
    """`text` as literal markdown: control characters escaped, markdown syntax backslashed, HTML's
    `&`, `<` and `>` written as entities."""
    text = _MARKDOWN_SYNTAX.sub(lambda m: "\\" + m.group(), for_terminal(text))
    text = _AUTOLINK.sub(lambda m: m.group()[:-1] + "\\" + m.group()[-1], text)
    return re.sub("[&<>]", lambda m: _HTML[m.group()], text)


TOOLTIP_CHARS = 2_000      # a 100,000-character name in every tooltip made the page megabytes; data-key keeps it


def for_html(text: object) -> str:
    """`text` as literal HTML text or attribute value: control characters escaped, then `&<>"'` as entities."""
    return html.escape(for_terminal(text), quote=True)


def for_tooltip(text: object) -> str:
    """`text` for a tooltip (an attribute value or an SVG <title>): for_html of at most TOOLTIP_CHARS of it."""
    text = str(text)
    return for_html(text if len(text) <= TOOLTIP_CHARS else text[:TOOLTIP_CHARS] + "…")
