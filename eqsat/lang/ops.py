"""The typed ONNX ops of the op language and how each maps to and from ONNX.

`rules/lang.egg` declares one constructor per op here; its arguments are the op's inputs in
ONNX order, then its attributes in alphabetical order, then (ops with several outputs) the
number of outputs. This table adds what egglog cannot say: the ONNX name and domain, which
inputs are optional or variadic, attribute kinds and defaults, and, for ops whose older
versions took an input as an attribute, how to convert. `tests/test_lang.py` checks that the
table and the prelude agree.

Contract of a spec: a node encodes to its constructor only if every attribute it carries is
in the spec with the expected kind, its opset version is at least `min_version`, and it has
no used outputs beyond the first (ops with `n_outputs` excepted); any other node is carried
as `Opaque`, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Attribute kinds and the egglog sort each becomes.
ATTR_SORTS = {
    "int": "i64",
    "float": "f64",
    "str": "String",
    "ints": "IVec",
    "floats": "FVec",
    "dtype": "DType",
    "int?": "OptInt",
    "float?": "OptFloat",
    "tensor": "Op",
    "graph": "String",
}


@dataclass(frozen=True)
class Attr:
    name: str
    kind: str  # a key of ATTR_SORTS
    default: object = None  # None: no default (required, or absent = empty / NoInt)


@dataclass(frozen=True)
class LegacyInput:
    """An input that opsets before `until` took as the attribute `attr`."""

    attr: str
    until: int
    kind: str = "ints"  # "ints" (an int64 1-D tensor) or "float" (a scalar of the data's type)


@dataclass(frozen=True)
class OpSpec:
    ctor: str
    inputs: tuple[str, ...] = ("X",)  # name, name? (optional), name* (variadic, only one)
    attrs: tuple[Attr, ...] = ()
    op_type: str = ""  # defaults to ctor
    domain: str = ""
    min_version: int = 1
    n_outputs: bool = False  # the term is a tuple: outputs are (Out node k)
    legacy: dict[str, LegacyInput] = field(default_factory=dict)
    captures: bool = False  # has graph attributes: outer-scope names become an OpList
    outputs: tuple[str, ...] = ()  # with n_outputs: output names, "?" marks optional ones
    contrib: bool = False  # an onnxruntime op: no onnx schema, always version 1 of its domain
    # quantizes its output again from integer arithmetic: a rewrite into it rounds otherwise than
    # the DQ -> op -> Q it replaces (verification's QDQ allowance; eqsat.core.requantize)
    requantizes: bool = False

    @property
    def onnx_type(self) -> str:
        return self.op_type or self.ctor

    def arg_sorts(self) -> list[str]:
        sorts = ["OpList" if i.endswith("*") else "Op" for i in self.inputs]
        sorts += [ATTR_SORTS[a.kind] for a in self.attrs]
        if self.captures:
            sorts.append("OpList")
        if self.n_outputs:
            sorts.append("i64")
        return sorts


def _unary(*names: str) -> list[OpSpec]:
    return [OpSpec(n) for n in names]


def _binary(*names: str, min_version: int = 7) -> list[OpSpec]:
    return [OpSpec(n, ("A", "B"), min_version=min_version) for n in names]


def _reduce(name: str, axes_input_since: int) -> OpSpec:
    return OpSpec(
        name,
        ("data", "axes?"),
        (Attr("keepdims", "int", 1), Attr("noop_with_empty_axes", "int", 0)),
        legacy={"axes": LegacyInput("axes", axes_input_since)},
    )


_POOL_COMMON = (Attr("auto_pad", "str", "NOTSET"), Attr("ceil_mode", "int", 0))

# Conv's attributes, shared by QLinearConv and the fused and blocked convolutions
_CONV_ATTRS = (
    Attr("auto_pad", "str", "NOTSET"),
    Attr("dilations", "ints"),
    Attr("group", "int", 1),
    Attr("kernel_shape", "ints"),
    Attr("pads", "ints"),
    Attr("strides", "ints"),
)

SPECS: list[OpSpec] = [
    *_unary(
        "Abs", "Ceil", "Cos", "Erf", "Exp", "Floor", "HardSwish", "Identity", "Log", "Neg",
        "Not", "Reciprocal", "Relu", "Sigmoid", "Sin", "Softplus", "Sqrt", "Tanh",
    ),
    OpSpec("Elu", attrs=(Attr("alpha", "float", 1.0),)),
    OpSpec("Gelu", attrs=(Attr("approximate", "str", "none"),)),
    OpSpec("HardSigmoid", attrs=(Attr("alpha", "float", 0.2), Attr("beta", "float", 0.5))),
    OpSpec("LeakyRelu", attrs=(Attr("alpha", "float", 0.01),)),
    OpSpec(
        "Clip",
        ("input", "min?", "max?"),
        legacy={"min": LegacyInput("min", 11, "float"), "max": LegacyInput("max", 11, "float")},
        min_version=6,
    ),
    OpSpec(
        "Cast",
        ("input",),
        (Attr("round_mode", "str", "up"), Attr("saturate", "int", 1), Attr("to", "dtype")),
        min_version=6,
    ),
    OpSpec("CastLike", ("input", "target_type"), (Attr("round_mode", "str", "up"), Attr("saturate", "int", 1))),
    OpSpec(
        "Dropout",
        ("data", "ratio?", "training_mode?"),
        (Attr("seed", "int?"),),
        legacy={"ratio": LegacyInput("ratio", 12, "float")},
        min_version=7,
    ),
    *_binary("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "And", "Or"),
    OpSpec("Where", ("condition", "X", "Y")),
    OpSpec("Sum", ("data_0*",), min_version=8),
    OpSpec("Max", ("data_0*",), min_version=8),
    OpSpec("Min", ("data_0*",), min_version=8),
    OpSpec("MatMul", ("A", "B")),
    OpSpec(
        "Gemm",
        ("A", "B", "C?"),
        (Attr("alpha", "float", 1.0), Attr("beta", "float", 1.0), Attr("transA", "int", 0), Attr("transB", "int", 0)),
        min_version=7,
    ),
    OpSpec(
        "Conv",
        ("X", "W", "B?"),
        _CONV_ATTRS,
    ),
    OpSpec(
        "MaxPool",
        attrs=(
            *_POOL_COMMON,
            Attr("dilations", "ints"),
            Attr("kernel_shape", "ints"),
            Attr("pads", "ints"),
            Attr("storage_order", "int", 0),
            Attr("strides", "ints"),
        ),
    ),
    OpSpec(
        "AveragePool",
        attrs=(
            *_POOL_COMMON,
            Attr("count_include_pad", "int", 0),
            Attr("dilations", "ints"),
            Attr("kernel_shape", "ints"),
            Attr("pads", "ints"),
            Attr("strides", "ints"),
        ),
    ),
    OpSpec("GlobalAveragePool"),
    OpSpec("GlobalMaxPool"),
    OpSpec(
        "BatchNormalization",
        ("X", "scale", "B", "input_mean", "input_var"),
        (Attr("epsilon", "float", 1e-5), Attr("momentum", "float", 0.9), Attr("training_mode", "int", 0)),
        min_version=9,
    ),
    OpSpec(
        "LayerNormalization",
        ("X", "Scale", "B?"),
        (Attr("axis", "int", -1), Attr("epsilon", "float", 1e-5), Attr("stash_type", "int", 1)),
    ),
    OpSpec(
        "RMSNormalization",
        ("X", "scale"),
        (Attr("axis", "int", -1), Attr("epsilon", "float", 1e-5), Attr("stash_type", "int", 1)),
    ),
    OpSpec("Softmax", ("input",), (Attr("axis", "int", -1),), min_version=13),
    OpSpec("LogSoftmax", ("input",), (Attr("axis", "int", -1),), min_version=13),
    _reduce("ReduceMean", 18),
    _reduce("ReduceSum", 13),
    _reduce("ReduceMax", 18),
    _reduce("ReduceMin", 18),
    # Quantization (rules/qdq.egg). Attributes of later opsets default to what earlier ones
    # did (axis 1, no blocks, the output type from the zero point, saturate): the decoder
    # leaves defaults out, so an opset-10 model gets opset-10 nodes back.
    OpSpec(
        "QuantizeLinear",
        ("x", "y_scale", "y_zero_point?"),
        (Attr("axis", "int", 1), Attr("block_size", "int", 0), Attr("output_dtype", "int", 0),
         Attr("precision", "int", 0), Attr("saturate", "int", 1)),
        min_version=10,
    ),
    OpSpec(
        "DequantizeLinear",
        ("x", "x_scale", "x_zero_point?"),
        (Attr("axis", "int", 1), Attr("block_size", "int", 0), Attr("output_dtype", "int", 0)),
        min_version=10,
    ),
    OpSpec(
        "QLinearConv",
        ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point", "B?"),
        _CONV_ATTRS,
        min_version=10,
        requantizes=True,
    ),
    OpSpec(
        "QLinearMatMul",
        ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"),
        min_version=10,
        requantizes=True,
    ),
    OpSpec("Transpose", ("data",), (Attr("perm", "ints"),)),
    OpSpec("Reshape", ("data", "shape"), (Attr("allowzero", "int", 0),), min_version=5),
    OpSpec("Flatten", ("input",), (Attr("axis", "int", 1),)),
    OpSpec("Squeeze", ("data", "axes?"), legacy={"axes": LegacyInput("axes", 13)}),
    OpSpec("Unsqueeze", ("data", "axes"), legacy={"axes": LegacyInput("axes", 13)}),
    OpSpec("Concat", ("inputs*",), (Attr("axis", "int"),)),
    OpSpec(
        "Split",
        ("input", "split?"),
        (Attr("axis", "int", 0), Attr("num_outputs", "int?")),
        n_outputs=True,
        legacy={"split": LegacyInput("split", 13)},
        min_version=2,
    ),
    OpSpec(
        "Slice",
        ("data", "starts", "ends", "axes?", "steps?"),
        legacy={
            "starts": LegacyInput("starts", 10),
            "ends": LegacyInput("ends", 10),
            "axes": LegacyInput("axes", 10),
        },
    ),
    OpSpec("Gather", ("data", "indices"), (Attr("axis", "int", 0),)),
    OpSpec(
        "Pad",
        ("data", "pads", "constant_value?", "axes?"),
        (Attr("mode", "str", "constant"),),
        legacy={"pads": LegacyInput("pads", 11), "constant_value": LegacyInput("value", 11, "float")},
        min_version=2,
    ),
    OpSpec("Expand", ("input", "shape")),
    OpSpec("Tile", ("input", "repeats"), min_version=6),
    OpSpec("Shape", ("data",), (Attr("end", "int?"), Attr("start", "int", 0))),
    OpSpec("ConstantOfShape", ("input",), (Attr("value", "tensor"),)),
    OpSpec("Range", ("start", "limit", "delta")),
    OpSpec("Trilu", ("input", "k?"), (Attr("upper", "int", 1),)),
    OpSpec(
        "Resize",
        ("X", "roi?", "scales?", "sizes?"),
        (Attr("antialias", "int", 0), Attr("axes", "ints"), Attr("coordinate_transformation_mode", "str", "half_pixel"),
         Attr("cubic_coeff_a", "float", -0.75), Attr("exclude_outside", "int", 0),
         Attr("extrapolation_value", "float", 0.0), Attr("keep_aspect_ratio_policy", "str", "stretch"),
         Attr("mode", "str", "nearest"), Attr("nearest_mode", "str", "round_prefer_floor")),
        min_version=11,  # Resize-10 has scales only and no coordinate transformation
    ),
    OpSpec(
        "If",
        ("cond",),
        (Attr("else_branch", "graph"), Attr("then_branch", "graph")),
        n_outputs=True,
        captures=True,
    ),
]

_MS = "com.microsoft"
_SKIP_OUTPUTS = ("output", "mean?", "inv_std_var?", "input_skip_bias_sum?")
# com.microsoft MultiHeadAttention's inputs and attributes, shared by its two ctors below
_MHA_INPUTS = (
    "query", "key?", "value?", "bias?", "key_padding_mask?", "attention_bias?", "past_key?",
    "past_value?", "past_sequence_length?", "cache_indirection?",
)
_MHA_ATTRS = (
    Attr("mask_filter_value", "float?"),
    Attr("num_heads", "int"),
    Attr("scale", "float?"),
    Attr("unidirectional", "int", 0),
)

SPECS += [
    OpSpec(
        "Attention",
        ("Q", "K", "V", "attn_mask?", "past_key?", "past_value?", "nonpad_kv_seqlen?"),
        (
            Attr("is_causal", "int", 0),
            Attr("kv_num_heads", "int?"),
            Attr("left_window_size", "int", -1),
            Attr("q_num_heads", "int?"),
            Attr("qk_matmul_output_mode", "int", 0),
            Attr("right_window_size", "int", -1),
            Attr("scale", "float?"),
            Attr("softcap", "float", 0.0),
            Attr("softmax_precision", "int?"),
        ),
        min_version=23,
    ),
    # onnxruntime's contrib ops (ORT's schemas: tests/test_lang.py checks them)
    OpSpec(
        "FusedConv",
        ("X", "W", "B?", "Z?"),
        (Attr("activation", "str"), Attr("activation_params", "floats"), *_CONV_ATTRS),
        domain=_MS,
        contrib=True,
    ),
    OpSpec(
        "FusedGemm",
        ("A", "B", "C?"),
        (
            Attr("activation", "str"),
            Attr("activation_alpha", "float?"),
            Attr("activation_beta", "float?"),
            Attr("activation_gamma", "float?"),
            Attr("alpha", "float", 1.0),
            Attr("beta", "float", 1.0),
            Attr("transA", "int", 0),
            Attr("transB", "int", 0),
        ),
        domain=_MS,
        contrib=True,
    ),
    OpSpec(
        "FusedMatMul",
        ("A", "B"),
        (
            Attr("alpha", "float", 1.0),
            Attr("transA", "int", 0),
            Attr("transB", "int", 0),
            Attr("transBatchA", "int", 0),
            Attr("transBatchB", "int", 0),
        ),
        domain=_MS,
        contrib=True,
    ),
    OpSpec(
        "SkipLayerNormalization",
        ("input", "skip", "gamma", "beta?", "bias?"),
        (Attr("epsilon", "float", 1e-12),),
        domain=_MS,
        contrib=True,
        n_outputs=True,
        outputs=_SKIP_OUTPUTS,
    ),
    OpSpec(
        "SkipSimplifiedLayerNormalization",
        ("input", "skip", "gamma", "bias?"),
        (Attr("epsilon", "float", 1e-12),),
        domain=_MS,
        contrib=True,
        n_outputs=True,
        outputs=_SKIP_OUTPUTS,
    ),
    OpSpec(
        "SimplifiedLayerNormalization",
        ("X", "scale"),
        (Attr("axis", "int", -1), Attr("epsilon", "float", 1e-5), Attr("stash_type", "int", 1)),
        contrib=True,  # registered by onnxruntime in the ai.onnx domain
    ),
    OpSpec("BiasGelu", ("A", "B"), domain=_MS, contrib=True),
    OpSpec("QLinearAdd", ("A", "A_scale", "A_zero_point?", "B", "B_scale", "B_zero_point?", "C_scale",
                          "C_zero_point?"), domain=_MS, contrib=True, requantizes=True),
    # com.microsoft.QLinearConv with channels_last = 1 (rules/qdq_nhwc.egg): x and y NHWC, w OIHW
    OpSpec("QLinearConvMs", ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale",
                             "y_zero_point", "B?"),
           (_CONV_ATTRS[0], Attr("channels_last", "int", 0), *_CONV_ATTRS[1:]), op_type="QLinearConv", domain=_MS,
           contrib=True, requantizes=True),
    # com.microsoft.NhwcMaxPool: MaxPool of an 8-bit NHWC tensor (rules/qdq_nhwc.egg)
    OpSpec("NhwcMaxPool", ("x",), (*_POOL_COMMON, Attr("dilations", "ints"), Attr("kernel_shape", "ints"),
                                   Attr("pads", "ints"), Attr("strides", "ints")), domain=_MS, contrib=True),
    OpSpec("QLinearSigmoid", ("X", "X_scale", "X_zero_point?", "Y_scale", "Y_zero_point?"), domain=_MS,
           contrib=True, requantizes=True),
    OpSpec("QLinearMul", ("A", "A_scale", "A_zero_point?", "B", "B_scale", "B_zero_point?", "C_scale",
                          "C_zero_point?"), domain=_MS, contrib=True, requantizes=True),
    OpSpec("QLinearLeakyRelu", ("X", "X_scale", "X_zero_point?", "Y_scale", "Y_zero_point?"),
           (Attr("alpha", "float", 0.01),), domain=_MS, contrib=True, requantizes=True),
    OpSpec("QLinearAveragePool", ("X", "x_scale", "x_zero_point?", "y_scale", "y_zero_point?"),
           (*_POOL_COMMON, Attr("channels_last", "int", 0), Attr("count_include_pad", "int", 0),
            Attr("kernel_shape", "ints"), Attr("pads", "ints"), Attr("strides", "ints")), domain=_MS, contrib=True,
           requantizes=True),
    OpSpec("QLinearGlobalAveragePool", ("X", "x_scale", "x_zero_point", "y_scale", "y_zero_point"),
           (Attr("channels_last", "int", 0),), domain=_MS, contrib=True, requantizes=True),
    # inputs: (X, X_scale, X_zero_point) for each value concatenated, in one list
    OpSpec("QLinearConcat", ("Y_scale", "Y_zero_point", "inputs*"), (Attr("axis", "int"),), domain=_MS,
           contrib=True, requantizes=True),
    OpSpec("QGemm", ("A", "a_scale", "a_zero_point", "B", "b_scale", "b_zero_point", "C?", "y_scale?",
                     "y_zero_point?"),
           (Attr("alpha", "float", 1.0), Attr("transA", "int", 0), Attr("transB", "int", 0)), domain=_MS,
           contrib=True, requantizes=True),
    # opset: the ai.onnx Softmax semantics (13: along `axis` alone; before 13: flattened from it)
    OpSpec("QLinearSoftmax", ("X", "X_scale", "x_zero_point?", "y_scale", "y_zero_point"),
           (Attr("axis", "int", -1), Attr("opset", "int")), domain=_MS, contrib=True, requantizes=True),
    OpSpec("FastGelu", ("X", "bias?"), domain=_MS, contrib=True),
    OpSpec("GeluMs", ("X",), op_type="Gelu", domain=_MS, contrib=True),
    OpSpec("QuickGelu", ("X",), (Attr("alpha", "float", 1.702),), domain=_MS, contrib=True),
    # onnxruntime's 4-bit weight-only quantized MatMul (rules/nbits.egg)
    OpSpec(
        "MatMulNBits",
        ("A", "B", "scales", "zero_points?", "g_idx?", "bias?"),
        (
            Attr("K", "int"),
            Attr("N", "int"),
            Attr("accuracy_level", "int", 0),
            Attr("bits", "int", 4),
            Attr("block_size", "int"),
            Attr("weight_prepacked", "int", 0),
        ),
        domain=_MS,
        contrib=True,
    ),
    # MultiHeadAttention with past_key / past_value and its present outputs: a tuple (Out e k).
    # Listed before MultiHeadAttention, which the encoder maps an ONNX MultiHeadAttention to
    # (one with present outputs used is carried as Opaque). The presents are always named
    # (not "?"): onnxruntime 1.32's kernel ignores the past where one of them is not asked for,
    # and attends to the new keys alone (tests/rules/test_decoder_soundness.py).
    OpSpec(
        "MultiHeadAttentionPast",
        _MHA_INPUTS,
        _MHA_ATTRS,
        op_type="MultiHeadAttention",
        domain=_MS,
        contrib=True,
        n_outputs=True,
        outputs=("output", "present_key", "present_value", "qk?"),
    ),
    OpSpec(
        "MultiHeadAttention",
        _MHA_INPUTS,
        _MHA_ATTRS,
        domain=_MS,
        contrib=True,
    ),
    # onnxruntime's RotaryEmbedding (rules/rotary.egg); the ctor is not the op's name: ai.onnx
    # has its own RotaryEmbedding since opset 23, with other inputs. onnxruntime's schema gives
    # no attribute a default (its kernel reads 0, and scale 1.0): all are optional here.
    OpSpec(
        "RotaryEmbeddingMs",
        ("input", "position_ids", "cos_cache", "sin_cache"),
        (
            Attr("interleaved", "int?"),
            Attr("is_packed_batching", "int?"),
            Attr("num_heads", "int?"),
            Attr("rotary_embedding_dim", "int?"),
            Attr("scale", "float?"),
        ),
        op_type="RotaryEmbedding",
        domain=_MS,
        contrib=True,
    ),
]

# onnxruntime's NCHWc layout ops (rules/layout.egg): CPU kernels on channel-blocked tensors.
_NCHWC = "com.microsoft.nchwc"
SPECS += [
    OpSpec("NchwcReorderInput", attrs=(Attr("channels_last", "int", 0),), op_type="ReorderInput",
           domain=_NCHWC, contrib=True),
    OpSpec("NchwcReorderOutput", attrs=(Attr("channels", "int", 0), Attr("channels_last", "int", 0)),
           op_type="ReorderOutput", domain=_NCHWC, contrib=True),
    # Without an activation: listed before NchwcConv, which an input model's nodes encode to.
    OpSpec("NchwcConvPlain", ("X", "W", "B?", "Sum?"), _CONV_ATTRS, op_type="Conv", domain=_NCHWC, contrib=True),
    OpSpec(
        "NchwcConv",
        ("X", "W", "B?", "Sum?"),
        (Attr("activation", "str"), Attr("activation_params", "floats"), *_CONV_ATTRS),
        op_type="Conv",
        domain=_NCHWC,
        contrib=True,
    ),
    OpSpec(
        "NchwcMaxPool",
        attrs=(*_POOL_COMMON, Attr("dilations", "ints"), Attr("kernel_shape", "ints"), Attr("pads", "ints"),
               Attr("storage_order", "int", 0), Attr("strides", "ints")),
        op_type="MaxPool",
        domain=_NCHWC,
        contrib=True,
    ),
    OpSpec(
        "NchwcAveragePool",
        attrs=(*_POOL_COMMON, Attr("count_include_pad", "int", 0), Attr("dilations", "ints"),
               Attr("kernel_shape", "ints"), Attr("pads", "ints"), Attr("strides", "ints")),
        op_type="AveragePool",
        domain=_NCHWC,
        contrib=True,
    ),
    OpSpec("NchwcGlobalAveragePool", op_type="GlobalAveragePool", domain=_NCHWC, contrib=True),
    OpSpec("NchwcGlobalMaxPool", op_type="GlobalMaxPool", domain=_NCHWC, contrib=True),
    OpSpec("NchwcUpsample", attrs=(Attr("coordinate_transformation_mode", "str", "asymmetric"),
                                   Attr("mode", "str", "nearest"), Attr("scales", "ints")),
           op_type="Upsample", domain=_NCHWC, contrib=True),
    # eqsat-internal (schema registered by eqsat.lang.contrib): a filter in a blocked layout.
    # Rules apply it to constant weights only; the folding oracle evaluates it; no model
    # imports its domain, so extraction never chooses it (eqsat.backends.ort.target.forbidden_constructors).
    OpSpec("ReorderFilter", ("W",), (Attr("block", "int"), Attr("layout", "str")), domain="eqsat.internal"),
    # ... and a filter or bias with zero channels appended along an axis (padded to the block).
    OpSpec("PadChannels", ("X",), (Attr("axis", "int", 0), Attr("channels", "int")), domain="eqsat.internal"),
    # ... and a 4-bit DequantizeLinear's weight and zero point packed for MatMulNBits (rules/nbits.egg,
    # eqsat/oracle/nbits.py)
    OpSpec("PackNBitsWeight", ("W",), (Attr("block_size", "int"),), domain="eqsat.internal"),
    OpSpec("PackNBitsZeroPoint", ("Z",), (Attr("blocks", "int"), Attr("columns", "int")), domain="eqsat.internal"),
]

BY_CTOR: dict[str, OpSpec] = {s.ctor: s for s in SPECS}
BY_ONNX: dict[tuple[str, str], OpSpec] = {(s.domain, s.onnx_type): s for s in SPECS}
# The ctors whose ops requantize (OpSpec.requantizes): what a program without requantizing
# fusions leaves out (eqsat.core.requantize).
REQUANTIZING_CTORS = frozenset(s.ctor for s in SPECS if s.requantizes)


def spec_for(domain: str, op_type: str) -> OpSpec | None:
    return BY_ONNX.get(("" if domain == "ai.onnx" else domain, op_type))


# The constant constructors of sort Op in rules/lang.egg: a term that is a tensor's value,
# with no Op children. (Const key) is a tensor in the store by content key; (Ints v) a 1-D
# int64 tensor; (ScalarF x dtype shape) and (ScalarI n dtype shape) one-element tensors. The
# single list of them: decoding, folding, measuring, explaining and the rule checker read it.
LITERAL_CTORS = ("Const", "Ints", "ScalarF", "ScalarI")

# Constructors of sort Op in rules/lang.egg that are term structure, not ONNX ops: graph
# inputs, constants and literals, the absent optional input, a multi-output op's k-th
# output, and an op the language does not model.
STRUCTURE_CTORS = frozenset({"Input", *LITERAL_CTORS, "Absent", "Out", "Opaque"})


def prelude_disagreements(constructors: dict[str, tuple[str, list[str]]]) -> list[str]:
    """How the constructors rules/lang.egg declared (name -> (sort, argument sorts)) differ
    from this table; empty when they agree. The prelude is what egglog sees and this table
    is how eqsat encodes and decodes: an op in one and not the other, or with other argument
    sorts, would encode terms that no rule matches, or decode them wrongly."""
    ops = {n: args for n, (sort, args) in constructors.items() if sort == "Op" and n not in STRUCTURE_CTORS}
    out = [f"{c}: declared in rules/lang.egg, missing from eqsat/lang/ops.py" for c in sorted(set(ops) - set(BY_CTOR))]
    out += [f"{c}: in eqsat/lang/ops.py, missing from rules/lang.egg" for c in sorted(set(BY_CTOR) - set(ops))]
    out += [f"{c}: rules/lang.egg has arguments {ops[c]}, eqsat/lang/ops.py {BY_CTOR[c].arg_sorts()}"
            for c in sorted(set(ops) & set(BY_CTOR)) if ops[c] != BY_CTOR[c].arg_sorts()]
    return out
