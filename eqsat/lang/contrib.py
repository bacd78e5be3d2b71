"""onnxruntime ops that live in the ai.onnx domain without being ONNX ops.

onnxruntime registers a few contrib ops (SimplifiedLayerNormalization) in the default
domain. The onnx checker rejects a node whose op its registry does not know in the default
domain, so eqsat registers their schemas in onnx's registry (for this process) before it
checks a model it wrote. A model holding them is an onnxruntime model: other runtimes, and
an onnx checker without these schemas, reject it. Target `onnx` never produces them.

It also registers eqsat's internal ops (domain `eqsat.internal`), which rules apply to
constants only and the folding oracle evaluates (eqsat/oracle/layout.py): `ReorderFilter`
turns a Conv filter into the blocked layout of onnxruntime's NCHWc convolution, and
`PadChannels` appends zero channels to a filter or bias (output or input channels padded to
the block); `PackNBitsWeight` and `PackNBitsZeroPoint` pack a 4-bit DequantizeLinear's weight
and zero points for onnxruntime's MatMulNBits (eqsat/oracle/nbits.py). No model imports that
domain, so extraction never chooses them and no written model holds them.
"""

from __future__ import annotations

import onnx
from onnx import defs

_registered = False


def _simplified_layer_norm() -> defs.OpSchema:
    p = defs.OpSchema.FormalParameter
    opt = defs.OpSchema.FormalParameterOption
    a = defs.OpSchema.Attribute
    return defs.OpSchema(
        "SimplifiedLayerNormalization", "", 1,
        doc="onnxruntime: RMS normalization, Y = X / sqrt(mean(X^2, axis) + epsilon) * scale",
        inputs=[p("X", "T"), p("scale", "V")],
        outputs=[p("Y", "V"), p("inv_std_var", "U", "", param_option=opt.Optional)],
        type_constraints=[
            ("T", ["tensor(float)", "tensor(float16)", "tensor(double)", "tensor(bfloat16)"], ""),
            ("U", ["tensor(float)", "tensor(double)"], ""),
            ("V", ["tensor(float)", "tensor(float16)", "tensor(double)", "tensor(bfloat16)"], ""),
        ],
        attributes=[
            a("axis", onnx.helper.make_attribute("axis", -1), "the first normalized dimension"),
            a("epsilon", onnx.helper.make_attribute("epsilon", 1e-5), "added to the variance"),
            a("stash_type", onnx.helper.make_attribute("stash_type", 1), "type of mean and inv_std_var"),
        ],
    )


INTERNAL_DOMAIN = "eqsat.internal"


def _internal_op(name: str, doc: str, x: str, attributes: list) -> defs.OpSchema:
    """A schema of eqsat's internal domain: one float tensor in, one out (folded, never extracted)."""
    p = defs.OpSchema.FormalParameter
    return defs.OpSchema(name, INTERNAL_DOMAIN, 1, doc=doc, inputs=[p(x, "T")], outputs=[p("Y", "T")],
                         type_constraints=[("T", ["tensor(float)"], "")], attributes=attributes)


def _reorder_filter() -> defs.OpSchema:
    a = defs.OpSchema.Attribute
    string, integer = defs.OpSchema.AttrType.STRING, defs.OpSchema.AttrType.INT
    return _internal_op(
        "ReorderFilter",
        "eqsat: a 4-D Conv filter [O, I, KH, KW] in onnxruntime's NCHWc filter layout "
        "(OIHWBiBo: [O/b, I/b, KH, KW, b_i, b_o]; OIHWBo: [O/b, I, KH, KW, b_o]), same shape",
        "W",
        [a("block", integer, "the channel block size b", required=True),
         a("layout", string, "OIHWBiBo or OIHWBo", required=True)],
    )


def _pad_channels() -> defs.OpSchema:
    a = defs.OpSchema.Attribute
    return _internal_op(
        "PadChannels",
        "eqsat: X with zeros appended along `axis` up to `channels` entries (a Conv filter's "
        "or bias's output channels, axis 0, or a filter's input channels, axis 1, padded to "
        "onnxruntime's NCHWc block)",
        "X",
        [a("channels", defs.OpSchema.AttrType.INT, "length of the axis after padding", required=True),
         a("axis", defs.OpSchema.AttrType.INT, "the axis padded", required=False)],
    )


def _pack_nbits(name: str, doc: str, x: str, attributes: list) -> defs.OpSchema:
    """A schema of eqsat's internal 4-bit packing (eqsat/oracle/nbits.py): a 4-bit integer tensor in, uint8 out."""
    p = defs.OpSchema.FormalParameter
    return defs.OpSchema(name, INTERNAL_DOMAIN, 1, doc=doc, inputs=[p(x, "T")], outputs=[p("Y", "U")],
                         type_constraints=[("T", ["tensor(int4)", "tensor(uint4)", "tensor(uint8)"], ""),
                                           ("U", ["tensor(uint8)"], "")],
                         attributes=attributes)


def _pack_nbits_weight() -> defs.OpSchema:
    a = defs.OpSchema.Attribute
    return _pack_nbits(
        "PackNBitsWeight",
        "eqsat: a 4-bit weight [K, N] in MatMulNBits' packed form [N, K/block_size, block_size/2] "
        "(int4 codes offset by 8)",
        "W",
        [a("block_size", defs.OpSchema.AttrType.INT, "the quantization block along K", required=True)],
    )


def _pack_nbits_zero_point() -> defs.OpSchema:
    a = defs.OpSchema.Attribute
    integer = defs.OpSchema.AttrType.INT
    return _pack_nbits(
        "PackNBitsZeroPoint",
        "eqsat: 4-bit zero points [blocks, columns] (or one, broadcast) in MatMulNBits' packed "
        "form [columns, ceil(blocks/2)] (int4 offset by 8)",
        "Z",
        [a("blocks", integer, "blocks along K", required=True),
         a("columns", integer, "N", required=True)],
    )


def register() -> None:
    """Make onnx's checker accept onnxruntime's ai.onnx-domain contrib ops (idempotent)."""
    global _registered
    if _registered:
        return
    try:
        defs.get_schema("SimplifiedLayerNormalization", 1, "")
    except defs.SchemaError:
        defs.register_schema(_simplified_layer_norm())
    try:
        defs.get_schema("ReorderFilter", 1, INTERNAL_DOMAIN)
    except defs.SchemaError:
        defs.register_schema(_reorder_filter())
    try:
        defs.get_schema("PadChannels", 1, INTERNAL_DOMAIN)
    except defs.SchemaError:
        defs.register_schema(_pad_channels())
    for name, make in (("PackNBitsWeight", _pack_nbits_weight), ("PackNBitsZeroPoint", _pack_nbits_zero_point)):
        try:
            defs.get_schema(name, 1, INTERNAL_DOMAIN)
        except defs.SchemaError:
            defs.register_schema(make())
    _registered = True
