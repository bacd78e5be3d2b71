"""`eqsat rules list|check`."""

from __future__ import annotations


def register(subparsers) -> dict:
    return {}
