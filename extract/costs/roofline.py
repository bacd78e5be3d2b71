"""An analytic roofline model: the time of an op is its kernel overhead plus the larger of
its compute time (FLOPs over the peak rate of its kind) and its memory time (bytes read and
written over the bandwidth). FLOPs and bytes come from the shapes and dtypes of the e-node's
inputs and output; the rates from a hardware profile (extract/hardware/*.json).

Symbolic dimensions take the sizes bound by the caller (`dims`, by name), else
DEFAULT_DIM. A value with an unknown shape counts 0 bytes (the op then costs its
overhead). Costs are in microseconds, finite and > 0 for ops (the CostModel contract).

Layouts: a profile lists the data layouts its hardware has kernels for beyond NCHW
(`layouts`). `nchwc` (onnxruntime's channel-blocked CPU kernels, rules/layout.egg) gives
`conv_speedup`, the measured ratio of a blocked convolution's throughput to an NCHW one's on
that machine: a NchwcConv computes at matmul_gflops * conv_speedup, a depthwise one at the
layout's `depthwise_gflops`; a blocked MaxPool or AveragePool takes its NCHW form's time over
the layout's `pool_speedup` (an NCHW MaxPool or AveragePool visits its output's elements times
its window's area at the profile's `pool_gops` where it has one, else it is priced as an
element-wise op), a blocked GlobalAveragePool its NCHW form's over
`global_pool_speedup`, and a blocked convolution of a one-pixel image (squeeze-excite's
products, which read a filter once for one pixel) its time over `pixel_conv_speedup` (each
1 where the profile has none);
ReorderInput and ReorderOutput are copies (their time is memory only), at
the layout's `reorder_gbps` where the profile measured it (else `mem_gbps`); a linear Resize
costs the profile's `interpolation_flops` an output element, its blocked Upsample that over
the layout's `upsample_speedup`. `eqsat
calibrate` measures all of these on the machine it runs on (eqsat/backends/ort/calibrate_layout.py). A
depthwise convolution (one input channel per group, as many groups as channels) is no
GEMM: it computes at the profile's `depthwise_gflops` where the profile measured it (an NCHW
depthwise Conv runs far below the GEMM rate). On a profile without the layout, its ops cost
NO_LAYOUT_US (a second): never chosen where an NCHW alternative exists, yet finite, so that
an input model's own NCHWc ops (an onnxruntime-optimized model) can still be extracted.

8-bit convolutions (QLinearConv, and com.microsoft.QLinearConv as QLinearConvMs) compute at
the profile's `qconv_gops` (`qconv_depthwise_gops` for a depthwise one; else the float
convolution rates); an NCHW one also pays, after its work, the copies of the two transposes
onnxruntime's kernel makes inside (it computes channels-last), at the bandwidth a Transpose
gets. A Transpose is a copy: its bytes read and written, no arithmetic. So a channels-last
QLinearConv between two Transposes (rules/qdq_nhwc.egg) costs about what the NCHW one does,
plus two kernel overheads, and pays where a chain cancels the Transposes between its convs.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from ..egraph import EGraph, Node
from ..nchwc import BLOCKED_CONVS, BLOCKED_POOLS, GLOBAL_AVERAGE_POOL, NCHWC_OPS, REORDERS, UPSAMPLE, WINDOW_POOLS
from .base import DTYPE_BYTES, LEAF_COST, STRUCTURE, CostModel, positive

HARDWARE_DIR = Path(__file__).resolve().parent.parent / "hardware"
DEFAULT_DIM = 16
SYM_BASE = -(1 << 40)

MATMUL = {"MatMul", "FusedMatMul"}
GEMM = {"Gemm", "FusedGemm"}
CONV = {"Conv", "FusedConv"} | BLOCKED_CONVS
# 8-bit convolutions (x x_scale x_zero_point w ...: the filter is input 3); QLinearConvMs is
# com.microsoft.QLinearConv, channels-last where its channels_last attribute (child 10) is 1
QCONV = {"QLinearConv", "QLinearConvMs"}
QCONV_CHANNELS_LAST_AT = 10
NO_LAYOUT_US = 1e6
STEM_K = 64  # an NCHW convolution with fewer inputs per output runs at conv_gflops / stem_conv_slowdown
NARROW_CONV_M = 64  # an NCHW convolution with fewer outputs (a group's) runs below conv_gflops
PAYS = 1.03  # a measured speed-up below 3 % is within the noise: the rewrite is not taken
ALIAS_BYTES = 4096  # rows this many bytes apart share L1 cache sets (64 sets of 64-byte lines)
ALIAS_MIN_ROWS = 16  # fewer rows than this: measured no slower (a kernel reads few rows at once)
POOL = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "NhwcMaxPool"} | (BLOCKED_POOLS - {UPSAMPLE})
ATTENTION = {"MultiHeadAttention", "MultiHeadAttentionPast", "Attention"}
TRANSCENDENTAL = {"Erf", "Tanh", "Exp", "Log", "Sigmoid", "Gelu", "GeluMs", "FastGelu", "BiasGelu", "QuickGelu",
                  "Softmax", "LogSoftmax", "Sqrt", "Reciprocal", "Pow", "Softplus", "Sin", "Cos",
                  "Elu"}  # (HardSigmoid, HardSwish: a multiply-add and a clamp, priced as arithmetic)
NORMALIZATION = {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                 "SkipSimplifiedLayerNormalization", "RMSNormalization", "BatchNormalization"}
VIEWS = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Dropout"}
# op -> (position of its mode attribute among the node's children, blocked)
INTERPOLATION = {"Resize": (11, False), UPSAMPLE: (2, True)}
# a window pool -> the position of its kernel_shape among the node's children (rules/lang.egg)
KERNEL_SHAPE_AT = {"MaxPool": 4, "NchwcMaxPool": 4, "AveragePool": 5, "NchwcAveragePool": 5}


@dataclass(frozen=True)
class Hardware:
    """A hardware profile. Rates in GFLOP/s and GB/s, overhead in microseconds."""

    name: str
    matmul_gflops: float  # dense GEMM / convolution throughput
    vector_gflops: float  # element-wise arithmetic throughput
    mem_gbps: float  # sustained memory bandwidth
    kernel_overhead_us: float  # fixed cost of launching / dispatching one op
    transcendental_flops: float = 10.0  # FLOPs charged per element of Erf, Tanh, Exp, ...
    normalization_flops: float = 5.0  # FLOPs charged per element of (Skip)(Simplified)LayerNormalization
    interpolation_flops: float = 1.0  # FLOPs charged per output element of a linear Resize
    source: str = ""
    depthwise_gflops: float | None = None  # depthwise convolution (NCHW) throughput; None: matmul_gflops
    # dense NCHW convolution throughput (onnxruntime's im2col + GEMM runs below its MatMul's
    # rate); None: matmul_gflops
    conv_gflops: float | None = None
    # how much slower than conv_gflops an NCHW convolution with a spatial kernel and fewer than
    # STEM_K inputs per output (channels x kernel area: an image's 3x3 first layer) runs: a
    # GEMM with so short an inner dimension is far below the rate (a 1x1 one is not)
    stem_conv_slowdown: float = 1.0
    # an NCHW convolution (not depthwise, not a stem) with M < NARROW_CONV_M output channels a
    # group runs at conv_gflops x (M / NARROW_CONV_M) ** narrow_conv_exponent: its GEMM's few
    # rows fill the kernel's tiles partly (the blocked kernels, which compute whole blocks,
    # stay near their rate); 0.0: every width at conv_gflops
    narrow_conv_exponent: float = 0.0
    # 8-bit convolution (QLinearConv) throughput in GOP/s, channels-last, dense and depthwise;
    # None: conv_gflops (or matmul_gflops) and depthwise_gflops. onnxruntime's NCHW QLinearConv
    # runs the channels-last kernel between two transposes of its own, priced as copies
    qconv_gops: float | None = None
    qconv_depthwise_gops: float | None = None
    # NCHW MaxPool / AveragePool throughput in window elements a second (G/s): a pool's work
    # is its output's elements times its kernel's area (onnxruntime's NCHW kernels visit each
    # window, one element at a time); None: one FLOP per input element at vector_gflops
    pool_gops: float | None = None
    # bandwidth of an op whose tensors (read and written) fit in cache_mib MiB: element-wise
    # ops on activations that stay in cache run well above the streaming mem_gbps; None: mem_gbps
    cache_gbps: float | None = None
    cache_mib: float = 16.0
    layouts: dict = field(default_factory=dict)  # layout -> its parameters ("nchwc": block, conv_speedup)
    # parallel MatMuls on one input run faster as one MatMul on concatenated weights + Split
    # (rules/matmul.egg's group rules fire only then; false on the CPU: measured 1.03 to 1.12x slower)
    merge_parallel_matmuls: bool = False
    # com.microsoft.SkipLayerNormalization / SkipSimplifiedLayerNormalization are faster than the
    # residual Add and the (RMS) LayerNormalization they fuse (rules/transformer.egg; false on the
    # CPU: onnxruntime 1.32's kernels measured 3-4x and 1.4x slower than Add + LayerNormalization)
    fuse_skip_layernorm: bool = True
    # com.microsoft.MultiHeadAttention / the standard Attention op are faster than the attention
    # subgraph they replace (rules/attention.egg; false on the CPU: onnxruntime 1.32's kernel is
    # level with the subgraph alone and 0.5 to 2.4 % slower in GPT-2 and a Llama decoder)
    fuse_attention: bool = True
    # the same for attention without a mask (ViT's); a profile that fuses every attention fuses
    # these too (true on the CPU: 1 to 3 % faster in ViT-base, the kernel alone 10 % faster)
    fuse_unmasked_attention: bool = True
    # the same for attention with a KV cache (a decoder's step: keys and values Concat(past,
    # new)), fused into MultiHeadAttention with past_key / past_value and its present outputs
    # (true on the CPU: the step's attention alone 0.80-0.88 of the subgraph with the Concats)
    fuse_cached_attention: bool = True
    # a grouped-query attention's products take each kv head once, its g query heads stacked
    # as rows, instead of the kv heads repeated g times (rules/attention.egg; true on the CPU:
    # the core alone 5-8 % faster, a Llama decoder level to 1.5 %; off where no profile measured it)
    grouped_query_matmul: bool = False
    # how many times slower a float32 product runs when its left operand's rows lie a multiple
    # of 4 KiB apart (inner dimension a multiple of 1024) and it has at least ALIAS_MIN_ROWS
    # rows, than with the inner dimension padded by 16: the rows the GEMM kernel reads
    # together share L1 cache sets (rules/contraction.egg pads a transformer's MLP where this
    # is at least PAYS; 1.0: not measured, or no slower)
    contraction_alias_slowdown: float = 1.0
    # the learned cost model's weights (extract/costs/learned.py), fitted by `eqsat calibrate
    # --learn`: {"features": [...], "weights_us": [...], "trained_on": [...], ...}; None: not fitted
    learned: dict | None = None

    def pads_contraction(self) -> bool:
        """Whether padding an aliased contraction pays here (hardware-pays "pad-contraction")."""
        return self.contraction_alias_slowdown >= PAYS

    def has_layout(self, name: str) -> bool:
        return name in self.layouts

    @classmethod
    def load(cls, name_or_path: str | Path) -> Hardware:
        p = Path(name_or_path)
        if not p.suffix:
            p = HARDWARE_DIR / f"{name_or_path}.json"
        if not p.is_file():
            known = ", ".join(sorted(x.stem for x in HARDWARE_DIR.glob("*.json")))
            raise FileNotFoundError(f"no hardware profile {name_or_path!r} (known: {known}, or a .json path)")
        try:
            d = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise HardwareProfileError(f"{p}: not a readable JSON hardware profile ({e})") from None
        if not isinstance(d, dict):
            raise HardwareProfileError(f"{p}: a hardware profile is a JSON object, not {type(d).__name__}")
        rates = [f.name for f in fields(cls)
                 if f.default is MISSING and f.default_factory is MISSING and f.name != "name"]
        missing = [k for k in rates if k not in d]
        if missing or "name" not in d:
            raise HardwareProfileError(f"{p}: the profile lacks {', '.join(missing or ['name'])}; "
                                       f"`eqsat calibrate -o {p.name}` measures a complete one")
        bad = [k for k in rates if not positive(d[k])]
        if bad:
            raise HardwareProfileError(f"{p}: {', '.join(f'{k} = {d[k]!r}' for k in bad)}: rates must be numbers > 0")
        _check_profile(p, d, cls)
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


# what a profile's optional keys and its layouts' figures must hold (a quoted "false" is true
# to Python, a zero speed-up divides by zero after saturation)
LAYOUT_FIGURES = ("conv_speedup", "pool_speedup", "global_pool_speedup", "pixel_conv_speedup", "depthwise_gflops",
                  "reorder_gbps", "upsample_speedup")


# a profile's optional figures that must be numbers > 0: these never null (the FLOPs an element
# of an op kind costs, the cache's size), these null where another rate stands in
POSITIVE_FIGURES = ("transcendental_flops", "normalization_flops", "interpolation_flops", "cache_mib")
OPTIONAL_RATES = ("depthwise_gflops", "conv_gflops", "cache_gbps", "qconv_gops", "qconv_depthwise_gops", "pool_gops")


def _check_profile(p: Path, d: dict, cls) -> None:
    import difflib

    known = set(cls.__dataclass_fields__)
    for k, v in d.items():
        if k.endswith("_source") and k[:-len("_source")] in known or k == "source":
            continue  # where a figure came from
        if k not in known:
            near = difflib.get_close_matches(k, sorted(known), n=1)
            raise HardwareProfileError(f"{p}: unknown key {k!r}" + (f"; did you mean {near[0]!r}?" if near else ""))
        kind = cls.__dataclass_fields__[k].type
        if kind == "bool" and not isinstance(v, bool):
            raise HardwareProfileError(f"{p}: {k} = {v!r}: must be true or false (JSON, unquoted)")
        if k == "name" and not isinstance(v, str):
            raise HardwareProfileError(f"{p}: name = {v!r}: must be a string")
        if k == "narrow_conv_exponent" and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                                and 0 <= v <= 4):
            raise HardwareProfileError(f"{p}: {k} = {v!r}: must be a number from 0 to 4 (0: no slower)")
        if k in ("contraction_alias_slowdown", "stem_conv_slowdown") and not (positive(v) and math.isfinite(v)):
            raise HardwareProfileError(f"{p}: {k} = {v!r}: must be a finite number > 0 (a time ratio; 1.0: no slower)")
        if k in POSITIVE_FIGURES + OPTIONAL_RATES and not (positive(v) or (k in OPTIONAL_RATES and v is None)):
            raise HardwareProfileError(f"{p}: {k} = {v!r}: must be a number > 0")
    if d.get("learned") is not None and not isinstance(d["learned"], dict):
        raise HardwareProfileError(f"{p}: learned = {d['learned']!r}: must be an object (eqsat calibrate --learn)")
    layouts = d.get("layouts", {})
    if not isinstance(layouts, dict):
        raise HardwareProfileError(f"{p}: layouts = {layouts!r}: must be an object of layouts")
    for name, figures in layouts.items():
        if not isinstance(figures, dict):
            raise HardwareProfileError(f"{p}: layouts.{name} = {figures!r}: must be an object of figures")
        block = figures.get("block")
        if name == "nchwc" and (isinstance(block, bool) or not isinstance(block, int) or block <= 0):
            raise HardwareProfileError(f"{p}: layouts.nchwc.block = {block!r}: must be an integer > 0")
        for k in LAYOUT_FIGURES:
            if k in figures and not positive(figures[k]):
                raise HardwareProfileError(f"{p}: layouts.{name}.{k} = {figures[k]!r}: must be a number > 0")


class HardwareProfileError(ValueError):
    """A hardware profile file that cannot be used: not JSON, a rate missing or not > 0, an
    unknown key, or a flag or figure of the wrong kind."""


def profiles() -> list[str]:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.json"))


def literal_ints(egraph: EGraph, eclass: str) -> list[int] | None:
    """The integers of an `Ints` literal in the e-class, or None."""
    for nid in egraph.classes.get(eclass, ()):
        n = egraph.nodes[nid]
        if n.op == "Ints" and n.children and (vals := vector_ints(egraph, n.children[0])) is not None:
            return vals
    return None


def vector_ints(egraph: EGraph, eclass: str) -> list[int] | None:
    """The integers of an attribute vector e-class (sort IVec, a `vec-of` node), or None."""
    for nid in egraph.classes.get(eclass, ()):
        v = egraph.nodes[nid]
        if v.op == "vec-of":
            try:
                return [int(egraph.nodes[egraph.classes[c][0]].op) for c in v.children]
            except (IndexError, KeyError, ValueError):
                return None
    return None


def derived_shapes(egraph: EGraph, sym: dict[int, float]) -> dict[str, list[float]]:
    """Shapes, in sizes, of the e-classes the e-graph leaves without one because a dimension
    is a product with a symbolic one: grouped-query attention regroups [B, n, S, K] query
    heads as [B, k, n*S/k, K] (rules/attention.egg; shape-reshape-regroup knows it only for
    sizes), and the products and the Reshape back inherit the unknown. With the symbolic
    sizes bound, the same rules give numbers: Reshape(a, [0, k, -1, 0]), and MatMul /
    FusedMatMul of two 4-D operands with the same leading dims."""
    def known(c: str) -> list[float] | None:
        s = egraph.class_data.get(c, {}).get("shape")
        return sized(s, sym) if s is not None else out.get(c)

    todo = [n for n in egraph.nodes.values() if n.op in ("Reshape", "MatMul", "FusedMatMul")
            and egraph.class_data.get(n.eclass, {}).get("shape") is None]
    out: dict[str, list[float]] = {}
    changed = True
    while changed:
        changed = False
        for n in todo:
            if n.eclass in out:
                continue
            a = known(n.children[0]) if n.children else None
            if a is None or len(a) != 4:
                continue
            shape = None
            if n.op == "Reshape":
                t = literal_ints(egraph, n.children[1]) if len(n.children) > 1 else None
                if t and len(t) == 4 and t[0] == 0 and t[2] == -1 and t[3] == 0 and t[1] > 0:
                    shape = [a[0], float(t[1]), a[1] * a[2] / t[1], a[3]]
            else:
                b = known(n.children[1])
                tb = 0
                if n.op == "FusedMatMul":  # A B alpha transA transB transBatchA transBatchB
                    flags = [literal_int(egraph, c) for c in n.children[3:7]]
                    if flags[0] != 0 or flags[2:] != [0, 0]:
                        continue
                    tb = flags[1] or 0
                if b is not None and len(b) == 4 and a[:2] == b[:2]:
                    shape = [a[0], a[1], a[2], b[2] if tb else b[3]]
            if shape is not None:
                out[n.eclass] = shape
                changed = True
    return out


def sized(shape: list[int], sym: dict[int, float]) -> list[float]:
    """A shape with its symbolic dims (negative ids) replaced by their sizes (DEFAULT_DIM
    where unbound)."""
    return [d if d >= 0 else sym.get(d, DEFAULT_DIM) for d in shape]


def literal_str(egraph: EGraph, eclass: str) -> str | None:
    """The string primitive an e-class holds (unquoted), or None."""
    for nid in egraph.classes.get(eclass, ()):
        op = egraph.nodes[nid].op
        if nid.startswith("primitive-String") and len(op) >= 2 and op[0] == op[-1] == '"':
            return op[1:-1]
    return None


def literal_int(egraph: EGraph, eclass: str) -> int | None:
    """The integer primitive an e-class holds, or None."""
    for nid in egraph.classes.get(eclass, ()):
        try:
            return int(egraph.nodes[nid].op)
        except ValueError:
            continue
    return None


def aliased_rows(egraph: EGraph, node: Node, shape) -> bool:
    """Whether a product's left operand is float32 with rows a multiple of ALIAS_BYTES apart
    and at least ALIAS_MIN_ROWS of them (`shape(eclass)`: its shape in sizes, symbolic dims
    bound): MatMul, and FusedMatMul and Gemm without transA (FusedMatMul: nor transBatchA)."""
    if node.op not in MATMUL and node.op not in GEMM or not node.children:
        return False
    a = node.children[0]
    if egraph.class_data.get(a, {}).get("dtype", "F32") != "F32":
        return False
    flags = {"FusedMatMul": (3, 5), "Gemm": (5,), "FusedGemm": (9,)}.get(node.op, ())
    if any(len(node.children) <= i or literal_int(egraph, node.children[i]) != 0 for i in flags):
        return False
    s = shape(a)
    if not s or len(s) < 2 or not s[-1] or (s[-1] * 4) % ALIAS_BYTES:
        return False
    return math.prod(s[:-1]) >= ALIAS_MIN_ROWS


class Roofline(CostModel):
    """Contract: monotonic (every op costs at least its kernel overhead > 0)."""

    name = "roofline"
    unit = "us"

    def __init__(self, hardware: Hardware | str = "cpu", dims: dict[str, int] | None = None) -> None:
        self.hw = hardware if isinstance(hardware, Hardware) else Hardware.load(hardware)
        self.dims = dict(dims or {})

    # ---- shapes
    def _setup(self, egraph: EGraph) -> None:
        names = egraph.meta.get("dims", {})
        self._sym = {int(k): self.dims.get(v, DEFAULT_DIM) for k, v in names.items()}
        self._derived = derived_shapes(egraph, self._sym)

    def shape(self, egraph: EGraph, eclass: str) -> list[float] | None:
        """The e-class's shape in sizes: symbolic dims bound, or derived (derived_shapes)."""
        shape = egraph.class_data.get(eclass, {}).get("shape")
        if shape is None:
            return getattr(self, "_derived", {}).get(eclass)
        return sized(shape, self._sym)

    def numel(self, egraph: EGraph, eclass: str) -> float | None:
        shape = self.shape(egraph, eclass)
        return None if shape is None else math.prod(shape, start=1.0)

    def nbytes(self, egraph: EGraph, eclass: str) -> float:
        n = self.numel(egraph, eclass)
        dt = egraph.class_data.get(eclass, {}).get("dtype", "F32")
        return 0.0 if n is None else n * DTYPE_BYTES.get(dt, 4)

    def out_numel(self, egraph: EGraph, node: Node, inputs: list[str]) -> float:
        """Elements of a node's output: from its e-class's shape, else (a term a rule made
        without one) as many as its largest input, so that an unknown shape is never free."""
        n = self.numel(egraph, node.eclass)
        if n is not None:
            return n
        return max((self.numel(egraph, i) or 0.0 for i in inputs), default=0.0)

    def out_bytes(self, egraph: EGraph, node: Node, inputs: list[str]) -> float:
        """Bytes of a node's output (out_numel, at its dtype or its first input's)."""
        cd = egraph.class_data.get(node.eclass, {})
        dt = cd.get("dtype") or (egraph.class_data.get(inputs[0], {}).get("dtype") if inputs else None) or "F32"
        return self.out_numel(egraph, node, inputs) * DTYPE_BYTES.get(dt, 4)

    def dim(self, egraph: EGraph, eclass: str, axis: int) -> float | None:
        shape = self.shape(egraph, eclass)
        if not shape or not -len(shape) <= axis < len(shape):
            return None
        return shape[axis]

    def op_inputs(self, egraph: EGraph, node: Node) -> list[str]:
        out = []
        for k in node.children:
            t = egraph.class_type(k)
            if t == "Op":
                out.append(k)
            elif t == "OpList":
                c = k
                while egraph.classes.get(c):
                    cell = egraph.nodes[egraph.classes[c][0]]
                    if cell.op != "Cons":
                        break
                    out.append(cell.children[0])
                    c = cell.children[1]
        return out

    # ---- FLOPs
    def flops(self, egraph: EGraph, node: Node, inputs: list[str]) -> tuple[float, str]:
        """(FLOPs, kind) with kind "matmul" or "vector"."""
        op = node.op
        out_n = self.out_numel(egraph, node, inputs)
        if op in REORDERS or op == "Transpose":
            return 0.0, "vector"  # a copy: its time is memory only (bytes read and written)
        if op in MATMUL or op in GEMM:
            k = self.dim(egraph, inputs[0], -1) if inputs else None
            if op in GEMM and node.children:
                k = self._gemm_k(egraph, node, inputs) or k
            return 2.0 * out_n * (k or 1.0), "matmul"
        if op == "MatMulNBits":  # A [..., K] times the dequantized [K, N]: a product in float
            k = self.dim(egraph, inputs[0], -1) if inputs else None
            return 2.0 * out_n * (k or 1.0), "matmul"
        if (op in CONV and len(inputs) >= 2) or (op in QCONV and len(inputs) >= 4):
            # the filter: input 1, or 3 of an 8-bit convolution (x x_scale x_zero_point w ...)
            w = egraph.class_data.get(inputs[1 if op in CONV else 3], {}).get("shape")
            per_out = math.prod((d if d >= 0 else DEFAULT_DIM for d in (w or [])[1:]), start=1.0)
            return 2.0 * out_n * per_out, "matmul"
        if op in ATTENTION and inputs:
            q = self.numel(egraph, inputs[0]) or out_n
            # the keys' length: MultiHeadAttention's key [B, L, D] or [B, N, L, H] (shorter than
            # the queries where a model reduces its keys); Attention's input 1 is its weights
            keys = self.dim(egraph, inputs[1], -2) if op != "Attention" and len(inputs) > 1 else None
            seq = keys or self.dim(egraph, inputs[0], 1) or DEFAULT_DIM
            if op == "MultiHeadAttentionPast" and len(inputs) > 6:  # keys: the past's and the new ones
                seq = (self.dim(egraph, inputs[6], 2) or DEFAULT_DIM) + (self.dim(egraph, inputs[1], 1) or DEFAULT_DIM)
            return 4.0 * q * seq, "matmul"
        if op in TRANSCENDENTAL:
            return self.hw.transcendental_flops * out_n, "vector"
        if op in INTERPOLATION:  # linear: four reads and three lerps an element; nearest: a copy
            mode_at, blocked = INTERPOLATION[op]
            if len(node.children) > mode_at and literal_str(egraph, node.children[mode_at]) == "linear":
                speedup = float(self.hw.layouts.get("nchwc", {}).get("upsample_speedup", 1.0)) if blocked else 1.0
                return self.hw.interpolation_flops / speedup * out_n, "vector"
            return out_n, "vector"
        if op in NORMALIZATION:
            return self.hw.normalization_flops * out_n, "vector"
        if op.startswith("Reduce"):
            return sum(self.numel(egraph, i) or 0.0 for i in inputs[:1]), "vector"
        if op in POOL:
            return sum(self.numel(egraph, i) or 0.0 for i in inputs[:1]), "vector"
        return out_n, "vector"

    def depthwise(self, egraph: EGraph, inputs: list[str]) -> bool:
        """A convolution with one input channel per group and as many groups as channels (a
        blocked one may have its channels padded to the block: x[1] <= w[0] < 2 x[1])."""
        if len(inputs) < 2:
            return False
        w = egraph.class_data.get(inputs[1], {}).get("shape")
        x = egraph.class_data.get(inputs[0], {}).get("shape")
        return bool(w and x and len(w) >= 3 and len(x) >= 2 and w[1] == 1 and x[1] > 1 and x[1] <= w[0] < 2 * x[1])

    def bandwidth(self, moved: float, op: str) -> float:
        """GB/s for an op moving `moved` bytes: a reorder's measured rate, else the cache's
        where all it moves fits in the profile's cache_mib, else the streaming mem_gbps."""
        hw = self.hw
        if op in REORDERS and hw.has_layout("nchwc") and hw.layouts["nchwc"].get("reorder_gbps"):
            return float(hw.layouts["nchwc"]["reorder_gbps"])
        if hw.cache_gbps and moved <= hw.cache_mib * (1 << 20):
            return hw.cache_gbps
        return hw.mem_gbps

    def im2col_bytes(self, egraph: EGraph, node: Node, inputs: list[str]) -> float:
        """Bytes an NCHW convolution with a spatial kernel or strides writes to its im2col
        buffer and reads back (onnxruntime's CPU Conv; a 1x1 stride-1 one is a plain GEMM):
        2 x (input channels per group x kernel area) x output pixels x groups x 4."""
        w = egraph.class_data.get(inputs[1], {}).get("shape") if len(inputs) >= 2 else None
        out = self.shape(egraph, node.eclass)
        if not w or len(w) < 3 or not out or len(out) != len(w):
            return 0.0
        kernel = math.prod(d if d >= 0 else DEFAULT_DIM for d in w[2:])
        if kernel == 1 and not self._strided(egraph, node):
            return 0.0
        cin = w[1] if w[1] >= 0 else DEFAULT_DIM
        return 2.0 * 4.0 * cin * kernel * math.prod(out[2:]) * out[0] * self._groups(egraph, inputs[0], cin)

    def inner_dim(self, egraph: EGraph, inputs: list[str]) -> float:
        """A convolution's inputs per output: input channels per group x kernel area (its
        GEMM's inner dimension; unknown: STEM_K)."""
        w = egraph.class_data.get(inputs[1], {}).get("shape") if len(inputs) >= 2 else None
        if not w or len(w) < 3 or any(d < 0 for d in w[1:]):
            return float(STEM_K)
        return float(math.prod(w[1:]))

    def narrow_share(self, egraph: EGraph, inputs: list[str]) -> float:
        """The share of conv_gflops an NCHW convolution with M output channels a group runs at:
        (M / NARROW_CONV_M) ** narrow_conv_exponent below NARROW_CONV_M, else 1 (unknown: 1).
        At most 1 and never larger for fewer outputs: the price per FLOP never rises with M."""
        exponent = self.hw.narrow_conv_exponent
        w = egraph.class_data.get(inputs[1], {}).get("shape") if len(inputs) >= 2 else None
        if not exponent or not w or len(w) < 3 or w[0] <= 0 or w[1] <= 0:
            return 1.0
        return min(1.0, w[0] / self._groups(egraph, inputs[0], w[1]) / NARROW_CONV_M) ** exponent

    def _groups(self, egraph: EGraph, x: str, cin: float) -> int:
        """A convolution's groups: its input's channels over its filter's input channels `cin`
        (at least 1; unknown: 1)."""
        shape = egraph.class_data.get(x, {}).get("shape")
        return max(int(shape[1] // cin), 1) if shape and len(shape) > 1 and shape[1] > 0 and cin > 0 else 1

    def _one_pixel(self, egraph: EGraph, node: Node) -> bool:
        """Whether an op's output is one pixel a batch: [N, C, 1, 1] (squeeze-excite's products)."""
        out = self.shape(egraph, node.eclass)
        return bool(out) and len(out) == 4 and out[2] == 1 and out[3] == 1

    def _strided(self, egraph: EGraph, node: Node) -> bool:
        """Whether a Conv's strides are other than 1 (unknown: assumed not)."""
        pos = {"Conv": 8, "FusedConv": 11}.get(node.op)
        if pos is None or len(node.children) <= pos:
            return False
        st = vector_ints(egraph, node.children[pos])
        return bool(st) and any(v != 1 for v in st)

    def _qconv(self, egraph: EGraph, node: Node, inputs: list[str], rate: float) -> tuple[float, float]:
        """(GOP/s, bytes copied) of an 8-bit convolution: the profile's qconv_gops
        (qconv_depthwise_gops for one input channel per group, as many groups as filters), and
        for an NCHW one the bytes its two inner transposes read and write (its input to NHWC,
        its output back: onnxruntime's QLinearConv computes channels-last)."""
        hw = self.hw
        w = egraph.class_data.get(inputs[3], {}).get("shape") if len(inputs) >= 4 else None
        depthwise = bool(w and len(w) >= 3 and w[1] == 1 and w[0] > 1)
        if depthwise:
            rate = hw.qconv_depthwise_gops or hw.depthwise_gflops or hw.conv_gflops or rate
        else:
            rate = hw.qconv_gops or hw.conv_gflops or rate
        last = (node.op == "QLinearConvMs" and len(node.children) > QCONV_CHANNELS_LAST_AT
                and literal_int(egraph, node.children[QCONV_CHANNELS_LAST_AT]) == 1)
        copied = 0.0 if last else 2.0 * (self.nbytes(egraph, inputs[0]) + self.out_bytes(egraph, node, inputs))
        return rate, copied

    def _window_elements(self, egraph: EGraph, node: Node, inputs: list[str]) -> float:
        """Elements a MaxPool or AveragePool visits: its output's elements times its kernel's area."""
        at = KERNEL_SHAPE_AT[node.op]
        ks = vector_ints(egraph, node.children[at]) if len(node.children) > at else None
        return self.out_numel(egraph, node, inputs) * math.prod(ks or [1])

    def _gemm_k(self, egraph: EGraph, node: Node, inputs: list[str]) -> float | None:
        # Gemm A B C | alpha beta transA transB (FusedGemm has activation attributes first)
        trans_a_pos = 5 if node.op == "Gemm" else 9
        trans_a = literal_int(egraph, node.children[trans_a_pos]) if len(node.children) > trans_a_pos else None
        return self.dim(egraph, inputs[0], 0 if trans_a else -1)

    # ---- the cost
    def node_cost(self, egraph: EGraph, node: Node) -> float:
        if node.id.startswith("primitive-") or node.op in STRUCTURE or egraph.class_type(node.eclass) not in ("", "Op"):
            return LEAF_COST
        if not hasattr(self, "_sym"):
            self._setup(egraph)
        hw = self.hw
        if node.op in VIEWS:
            return hw.kernel_overhead_us * 0.25
        if node.op in NCHWC_OPS and not hw.has_layout("nchwc"):
            return NO_LAYOUT_US  # the hardware has no blocked kernels
        inputs = self.op_inputs(egraph, node)
        flops, kind = self.flops(egraph, node, inputs)
        moved = self.out_bytes(egraph, node, inputs) + sum(self.nbytes(egraph, i) for i in inputs)
        rate = hw.matmul_gflops if kind == "matmul" else hw.vector_gflops
        blocked = node.op in BLOCKED_CONVS
        staged = 0.0  # bytes an NCHW convolution copies into its im2col buffer and reads back
        if node.op in CONV:
            rate = hw.conv_gflops or hw.matmul_gflops
            if blocked:
                rate *= float(hw.layouts["nchwc"].get("conv_speedup", 1.0))
            if self.depthwise(egraph, inputs):
                dw = hw.layouts["nchwc"].get("depthwise_gflops") if blocked else hw.depthwise_gflops
                rate = float(dw) if dw else rate
            elif not blocked:
                staged = self.im2col_bytes(egraph, node, inputs)
                if staged and self.inner_dim(egraph, inputs) < STEM_K:
                    rate /= hw.stem_conv_slowdown
                else:
                    rate *= self.narrow_share(egraph, inputs)
        copies_us = 0.0  # an NCHW QLinearConv's inner transposes: copies before and after the kernel
        if node.op in QCONV:
            rate, copied = self._qconv(egraph, node, inputs, rate)
            copies_us = copied / (self.bandwidth(copied, "Transpose") * 1e3)
        compute_us = flops / (rate * 1e3)
        if node.op in KERNEL_SHAPE_AT and hw.pool_gops:
            compute_us = self._window_elements(egraph, node, inputs) / (hw.pool_gops * 1e3)
        memory_us = moved / (self.bandwidth(moved, node.op) * 1e3) + staged / (self.bandwidth(staged, "") * 1e3)
        if kind == "matmul" and hw.contraction_alias_slowdown != 1.0 \
                and aliased_rows(egraph, node, lambda c: self.shape(egraph, c)):
            compute_us *= hw.contraction_alias_slowdown  # the rows share L1 cache sets
        work_us = max(compute_us, memory_us) + copies_us
        if blocked and self._one_pixel(egraph, node):
            work_us /= float(hw.layouts["nchwc"].get("pixel_conv_speedup", 1.0))
        if node.op in WINDOW_POOLS and hw.has_layout("nchwc"):
            work_us /= float(hw.layouts["nchwc"].get("pool_speedup", 1.0))
        elif node.op == GLOBAL_AVERAGE_POOL and hw.has_layout("nchwc"):
            work_us /= float(hw.layouts["nchwc"].get("global_pool_speedup", 1.0))
        weight = float(egraph.meta.get("node_weight", {}).get(node.id, 1.0))
        t = hw.kernel_overhead_us * weight + work_us
        return t if math.isfinite(t) else 1e12

    def costs(self, egraph: EGraph) -> dict[str, float]:
        self._setup(egraph)
        return super().costs(egraph)
