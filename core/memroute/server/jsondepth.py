"""How deeply a JSON text nests, measured on the raw bytes without parsing them.

Python's ``json`` module, pydantic and every recursive walk over a parsed value recurse once per level: a 3 KB
body of 1,500 nested ``[`` raised ``RecursionError`` inside the server (a 500 before authentication). The guard
(:mod:`memroute.server.middleware`) measures a body with :func:`json_nesting_exceeds` before any route parses it.

The scan is exact for valid JSON (brackets inside strings do not count) and never recurses. It costs next to
nothing for an ordinary body: when the text holds no more opening brackets than the limit, it cannot nest
deeper, and two ``bytes.count`` calls decide that without a loop in Python.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["json_nesting_exceeds"]

_ESCAPE: Final = re.compile(rb"\\.", re.DOTALL)
_STRING: Final = re.compile(rb'"[^"]*"')
_STRUCTURE: Final = b'"[]{}'
_NOT_STRUCTURE: Final = bytes(b for b in range(256) if b not in _STRUCTURE)
_OPEN: Final = frozenset(b"[{")


def json_nesting_exceeds(body: bytes, limit: int) -> bool:
    """Whether the JSON text ``body`` nests arrays and objects more than ``limit`` levels deep (``{}`` is one
    level, ``{"a": [1]}`` two). Text that is not JSON is measured the same way: the parser refuses it later."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    # Escapes first (an escaped quote is no string delimiter), then everything but quotes and brackets, then
    # whole strings: what remains is the bracket structure. Each step runs in C.
    structure = _STRING.sub(b"", _ESCAPE.sub(b"", body).translate(None, _NOT_STRUCTURE))
    unterminated = structure.find(b'"')
    if unterminated >= 0:
        structure = structure[:unterminated]
    depth = 0
    for byte in structure:
        if byte in _OPEN:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False
