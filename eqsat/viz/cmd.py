"""`eqsat show` and `eqsat diff`."""

from __future__ import annotations


def register(subparsers) -> dict:
    return {}
