"""Text from runs as reports show it. A path or name recorded in run.json comes back as a
str with surrogate escapes where its bytes were not UTF-8 (os.fsdecode(b"caf\\xe9") is
"caf\\udce9"): such a str cannot be encoded as UTF-8 or drawn in a figure. Reports carry it
as it is (it still names the file) and show each such byte as \\xNN, visibly."""
from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(m: re.Match) -> str:
    c = ord(m.group())
    # U+DC80..U+DCFF is an undecodable byte 0x80..0xFF (surrogateescape); any other lone
    # surrogate (one a JSON file spelled out) stands for no byte: the replacement character.
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else "\ufffd"


def printable(text: str) -> str:
    """text with each undecodable byte as \\xNN, so that it encodes as UTF-8."""
    return _SURROGATE.sub(_shown, text)
