"""onnxruntime's MatMulNBits packing, for the folding oracle (rules/nbits.egg).

A quantizer writes a 4-bit weight as `DequantizeLinear(W, scale, zero_point, axis=0,
block_size=b)` with W int4 or uint4 [K, N] and scale, zero point [K/b, N]. MatMulNBits reads
the transposed weight, each column's codes in blocks of b along K, two codes a byte, the
first in the low nibble: B uint8 [N, K/b, b/2]; zero points the same way, [N, ceil(K/b / 2)]
(onnxruntime's contrib op schema). Its codes are unsigned and its default zero point is 8:
an int4 code c is stored as c + 8 (its zero point z as z + 8, and a missing one, 0, as the
default), so that (c + 8) - (z + 8) = c - z. Unsigned codes are stored as they are.

`PackNBitsWeight(W, block_size)` and `PackNBitsZeroPoint(Z, blocks, columns)` (domain
eqsat.internal) are evaluated here when the folding oracle folds them; they never reach an
output model.
"""

from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun


def _codes(x: np.ndarray) -> np.ndarray:
    """The unsigned 4-bit codes of an int4 (offset by 8), uint4 or uint8 tensor, as int16."""
    name = x.dtype.name
    v = np.asarray(x).astype(np.int16)
    if name == "int4":
        v = v + 8
    elif name not in ("uint4", "uint8"):
        raise ValueError(f"PackNBits: a 4-bit integer tensor expected, got {name}")
    if v.size and (v.min() < 0 or v.max() > 15):
        raise ValueError("PackNBits: codes outside [0, 15]")
    return v


def _pack_rows(v: np.ndarray) -> np.ndarray:
    """Pairs of codes along the last axis, the first in the low nibble (an odd count padded with 0)."""
    if v.shape[-1] % 2:
        v = np.concatenate([v, np.zeros((*v.shape[:-1], 1), v.dtype)], axis=-1)
    return (v[..., 0::2] | (v[..., 1::2] << 4)).astype(np.uint8)


def pack_weight(w: np.ndarray, block_size: int) -> np.ndarray:
    """W [K, N] -> uint8 [N, K/block_size, block_size/2]."""
    if w.ndim != 2 or block_size < 2 or block_size % 2 or w.shape[0] % block_size:
        raise ValueError(f"PackNBitsWeight: shape {list(w.shape)} is no [K, N] with K a multiple of "
                         f"the block size {block_size}")
    k, n = w.shape
    v = _codes(w).T.reshape(n, k // block_size, block_size)
    return np.ascontiguousarray(_pack_rows(v))


def pack_zero_point(z: np.ndarray, blocks: int, columns: int) -> np.ndarray:
    """Z [blocks, columns] (or one element, the same for every block) -> uint8 [columns, ceil(blocks/2)]."""
    if z.size == 1:
        z = np.broadcast_to(np.asarray(z).reshape(1, 1), (blocks, columns))
    if z.shape != (blocks, columns):
        raise ValueError(f"PackNBitsZeroPoint: shape {list(z.shape)} is not [{blocks}, {columns}]")
    return np.ascontiguousarray(_pack_rows(_codes(z).T))


class PackNBitsWeight(OpRun):
    """onnx's reference evaluator runs eqsat.internal.PackNBitsWeight with this."""

    op_domain = "eqsat.internal"

    def _run(self, w, block_size=None):  # noqa: D102 - OpRun's protocol
        return (pack_weight(np.asarray(w), int(block_size)),)


class PackNBitsZeroPoint(OpRun):
    """onnx's reference evaluator runs eqsat.internal.PackNBitsZeroPoint with this."""

    op_domain = "eqsat.internal"

    def _run(self, z, blocks=None, columns=None):  # noqa: D102 - OpRun's protocol
        return (pack_zero_point(np.asarray(z), int(blocks), int(columns)),)


NEW_OPS = [PackNBitsWeight, PackNBitsZeroPoint]
