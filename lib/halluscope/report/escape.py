"""Text from configs, stored runs and replay files (model ids, task names) made inert for each
output: a Markdown table cell, a terminal line. Config validation keeps new ids safe, but ids also
come from stored runs and files written by older versions or by hand."""

from __future__ import annotations

import re

# C0/C1 controls (ANSI escape sequences start with ESC or CSI), line and paragraph separators,
# and bidirectional overrides, which reorder what a reader sees
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_MARKDOWN = re.compile(r"[\\`*\[\]|]")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def visible(text: str) -> str:
    """Control characters written as ``\\x1b``-style escapes: shown, never obeyed by a terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def terminal(text: object) -> str:
    """Lines for a terminal: line breaks kept, every other control character made visible."""
    return "\n".join(visible(line) for line in str(text).split("\n"))


def markdown(text: object) -> str:
    """Safe inside a Markdown table cell and as plain Markdown text: no raw HTML, no column breaks
    (``|``), no code spans, emphasis or links, no control characters."""
    out = visible(str(text))
    out = "".join(_HTML.get(c, c) for c in out)
    return _MARKDOWN.sub(lambda m: "\\" + m.group(), out)
