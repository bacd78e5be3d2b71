"""Blocked filter layouts of onnxruntime's NCHWc convolution, for the folding oracle.

`ReorderFilter(W, block, layout)` (domain eqsat.internal, rules/layout.egg) is evaluated here
when the folding oracle folds it; it never reaches an output model. The layouts are MLAS's
(onnxruntime's `NchwcTransformer`, checked against its saved optimized models):

- OIHWBiBo, for a convolution whose input is blocked: [O/b, I/b, KH, KW, b_i, b_o], element
  [o, i, kh, kw] at [o // b, i // b, kh, kw, i % b, o % b]. Grouped convolutions use it on the
  whole filter (each group's output channels are whole blocks).
- OIHWBo, for a depthwise convolution and for one whose input stays NCHW (fewer input
  channels than the block): [O/b, I, KH, KW, b_o].

The result keeps the filter's shape [O, I, KH, KW] (O is a multiple of b), as onnxruntime's
initializers do; only the element order changes. `PadChannels(X, channels, axis)` first
appends zero channels to a filter (and its bias) whose O (axis 0) is not a multiple of b, as
onnxruntime pads them, a ReorderOutput with `channels` = O cropping them again; and zero input
channels (axis 1) to the filter of a convolution that reads such a padded blocked value, so
that the padded channels, whatever they hold, are multiplied by zero.
"""

from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun

from eqsat.oracle import nbits as _nbits

LAYOUTS = ("OIHWBiBo", "OIHWBo")


def reorder_filter(w: np.ndarray, block: int, layout: str) -> np.ndarray:
    if w.ndim != 4:
        raise ValueError(f"ReorderFilter: a 4-D filter expected, got shape {list(w.shape)}")
    o, i, kh, kw = w.shape
    if block <= 0 or o % block:
        raise ValueError(f"ReorderFilter: {o} output channels are not a multiple of the block {block}")
    if layout == "OIHWBiBo":
        if i % block:
            raise ValueError(f"ReorderFilter: {i} input channels are not a multiple of the block {block}")
        r = w.reshape(o // block, block, i // block, block, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    elif layout == "OIHWBo":
        r = w.reshape(o // block, block, i, kh, kw).transpose(0, 2, 3, 4, 1)
    else:
        raise ValueError(f"ReorderFilter: unknown layout {layout!r} (known: {', '.join(LAYOUTS)})")
    return np.ascontiguousarray(r).reshape(w.shape)


class ReorderFilter(OpRun):
    """onnx's reference evaluator runs eqsat.internal.ReorderFilter with this."""

    op_domain = "eqsat.internal"

    def _run(self, w, block=None, layout=None):  # noqa: D102 - OpRun's protocol
        lay = layout.decode() if isinstance(layout, bytes) else layout
        return (reorder_filter(np.asarray(w), int(block), lay),)


def pad_channels(x: np.ndarray, channels: int, axis: int = 0) -> np.ndarray:
    """x with zeros appended along `axis` up to `channels` entries: axis 0 of a Conv filter
    [O, I, KH, KW] or bias [O] whose output channels are padded to the block, axis 1 of a
    filter whose input is a padded blocked value (as onnxruntime's NchwcTransformer pads
    both)."""
    if not 0 <= axis < x.ndim or channels < x.shape[axis]:
        raise ValueError(f"PadChannels: cannot pad axis {axis} of shape {list(x.shape)} "
                         f"to {channels} channels")
    shape = list(x.shape)
    shape[axis] = channels - x.shape[axis]
    return np.concatenate([x, np.zeros(shape, dtype=x.dtype)], axis=axis)


class PadChannels(OpRun):
    """onnx's reference evaluator runs eqsat.internal.PadChannels with this."""

    op_domain = "eqsat.internal"

    def _run(self, x, channels=None, axis=None):  # noqa: D102 - OpRun's protocol
        return (pad_channels(np.asarray(x), int(channels), int(axis or 0)),)


# with the packing of rules/nbits.egg (eqsat/oracle/nbits.py)
NEW_OPS = [ReorderFilter, PadChannels, *_nbits.NEW_OPS]
