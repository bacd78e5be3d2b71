"""`eqsat conformance`: the onnx wheel's test cases through the default optimization."""

from __future__ import annotations


def register(subparsers) -> dict:
    return {}
