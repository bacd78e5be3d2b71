"""Reading primitive values back from egglog's serialized JSON.

egglog writes a primitive node's value in its `op` field: integers and floats as Rust
prints them (`-3`, `9.999999747378752e-6`, `NaN`, `inf`), strings in Rust's Debug form
(quoted, with `\\n`, `\\"`, `\\u{1f}` escapes).
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(r"\\(u\{([0-9a-fA-F]+)\}|.)", re.DOTALL)
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "0": "\0", "\\": "\\", '"': '"', "'": "'"}


def _unescape_one(m: re.Match) -> str:
    if m.group(2) is not None:
        return chr(int(m.group(2), 16))
    c = m.group(1)
    if c in _SIMPLE:
        return _SIMPLE[c]
    raise ValueError(f"unknown escape \\{c} in an egglog string")


def parse_string(op: str) -> str:
    if len(op) < 2 or op[0] != '"' or op[-1] != '"':
        raise ValueError(f"not an egglog string literal: {op!r}")
    return _ESCAPE.sub(_unescape_one, op[1:-1])


def parse_int(op: str) -> int:
    return int(op)


def parse_float(op: str) -> float:
    return float(op)  # Python reads NaN, inf, -inf and exponents as Rust writes them


def parse_bool(op: str) -> bool:
    if op not in ("true", "false"):
        raise ValueError(f"not an egglog bool literal: {op!r}")
    return op == "true"
