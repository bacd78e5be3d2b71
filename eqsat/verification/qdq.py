"""Verification's QDQ allowance (issue 30): where a rewrite requantizes, what onnxruntime's own
optimization of the original moves is the measure of what the rewrite may move."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import ModelProto

from eqsat.backends.ort.sessions import session
from eqsat.core.randomness import RANDOM_OPS
from eqsat.verification.mismatch import Mismatch
from eqsat.verification.qdq_float import NotWritable, as_float_ops

# onnxruntime transformers left out of the allowance's reference run: QDQFinalCleanupTransformer
# removes every DequantizeLinear -> QuantizeLinear pair of one scale and zero point, also where
# it is no identity (a float32 scale of 6.8e36 overflows (y - z) * s for |y - z| > 50, which
# Q saturates; a float16 one rounds int16 codes above 2048): with it, the allowance accepted
# the same pair removed by a rewrite, on any input. DoubleQDQPairsRemover makes
# Q(s1) -> DQ -> Q(s2) -> DQ one pair at one of the scales: with s1 = 0.01 and s2 = 1 its outputs
# lay up to half of s2 (50 steps of s1) from the original, and the allowance accepted a rule
# file's removal of the second pair. ClipQuantRewrite (ClipQuantFusion) removes a Clip before a
# QuantizeLinear where the Clip's bounds lie within float32's epsilon (1.2e-7, absolute) of the
# Q's range: with a Q scale of 1e-9 and zero point 10 a Clip at 0 clamps the range's lowest ten
# codes, and the allowance accepted a rule file's removal of that Clip (10 codes off)
QDQ_UNSOUND_TRANSFORMERS = ["QDQFinalCleanupTransformer", "DoubleQDQPairsRemover", "ClipQuantRewrite"]
# and its DequantizeLinear -> MatMul fusion into MatMulNBits computes in float32 there (accuracy
# level 1), not with activations rounded to int8 (its default, 4): in a model with a
# QuantizeLinear elsewhere, a 4-bit weight-only MatMul's output moved by 0.028 with it, and a
# block scale 1 % off (0.026) passed
QDQ_ALLOWANCE_CONFIG = {"session.qdq_matmulnbits_accuracy_level": "1"}
# onnxruntime's float fusions that fold a constant factor into a product: MatMulScaleFusion (a
# one-element Mul or Div before or after a MatMul into its alpha), ConvMulFusion and ConvBNFusion
# (a Mul or a BatchNormalization after a Conv into its weights), MatmulBNFusion (a
# BatchNormalization after a MatMul into a Gemm's). They change results by rounding alone where
# what they fold stays well inside float32's normal range: each factor within FOLD_FACTOR_RANGE
# (rules/matmul.egg's bound for a scale joining an alpha) and the product's constant operands'
# nonzero magnitudes within FOLD_WEIGHT_RANGE. Beyond, the original's intermediate values
# underflow (or overflow) where the fused form's do not: (x * 1e-44) @ W * 1e38 rounds x to 7
# levels, one alpha of 1e-6 does not, and 102 of 128 outputs of a Q of step 0.05 moved by up to
# 9 steps; a Conv over weights of 1e-44 times 1e38 moved 201 of 256 by up to 6 steps. There they
# are left out of the allowance's reference run (`float_folds_withheld`): what they move is no
# measure of what a rewrite may move
FOLD_FACTOR_RANGE = (2.0 ** -16, 2.0 ** 16)
# and, in every model, its fusions into kernels that compute otherwise than the pattern they
# replace: LayerNormFusion (LayerNormFusionL1 and L2 in onnxruntime 1.32, each level's; and
# SkipLayerNormFusion, EmbedLayerNormFusion, which make kernels that normalize so too) runs
# onnxruntime's LayerNormalization kernel, whose variance loses a row's
# spread beside a large mean, where the pattern subtracts the mean first: over x + 1e6 it moved
# 150 of 256 codes of a Q of step 0.01 by up to 7, and the default rules' own LayerNorm fusion,
# as far off, passed on that. Left out of the allowance's reference run alone (not of what
# eqsat.core.requantize reads as onnxruntime's requantizing fusions)
ALLOWANCE_WITHHELD_FUSIONS = ["LayerNormFusion", "LayerNormFusionL1", "LayerNormFusionL2", "SkipLayerNormFusion",
                              "EmbedLayerNormFusion"]
FOLD_WEIGHT_RANGE = (2.0 ** -60, 2.0 ** 60)


# Rounding spread (spread_unlike): onnxruntime's own optimization must move at least this many
# elements of an output, and this share of them, for its spread to be a measure; a program's
# differences may then reach SPREAD_MAX times its largest, SPREAD_MEAN times its mean, and
# SPREAD_COUNT times as many elements (plus two standard deviations of a count)
SPREAD_MIN, SPREAD_SHARE = 16, 0.05
SPREAD_MAX, SPREAD_MEAN, SPREAD_COUNT = 1.5, 1.25, 1.1
# and so in each slice of an output along each axis (a channel, a row, a column; a run of
# consecutive indices where one index holds fewer than SPREAD_MIN elements): ours may move
# there SPREAD_COUNT times as many elements as onnxruntime's own optimization plus
# SLICE_SIGMAS standard deviations of a count (a slice it leaves unmoved: a few; six, as an
# output has hundreds of slices, each one test), and, where it moves SPREAD_MIN of them,
# SLICE_MAX times as far at the largest
SLICE_SIGMAS, SLICE_MAX = 6.0, 3.0


def spread_unlike(ours: np.ndarray, theirs: np.ndarray, slack: np.ndarray) -> str:
    """Why a program's differences from the original (`ours`, signed) are not rounding spread like
    onnxruntime's own optimization's (`theirs`), elements within `slack` counting as unmoved;
    empty where they are. In a quantized network one step rounded otherwise early moves many
    outputs by a few steps, at elements no two programs share, so element by element two
    equally right programs differ. Spread is: onnxruntime's own optimization moves at least
    SPREAD_MIN elements and SPREAD_SHARE of them; ours moves no more elements (SPREAD_COUNT), no
    farther at most (SPREAD_MAX) or on average (SPREAD_MEAN), and without a bias: the mean
    signed difference within four standard errors of onnxruntime's (a zero point one step off
    shifts every element one way); and in each slice along each axis so too (`slice_unlike`):
    measured over the whole output alone, a column that onnxruntime's own optimization leaves
    unmoved or moves by its own small steps could take any values within the other columns'
    spread (negated, of another head)."""
    unlike = _whole_unlike(*(np.ravel(a) for a in (ours, theirs, slack)))
    return unlike or slice_unlike(ours, theirs, slack)


def slice_unlike(ours: np.ndarray, theirs: np.ndarray, slack: np.ndarray) -> str:
    """Why, in some slice of an output along some axis (a run of consecutive indices of that
    axis, all of the others: a channel, a row, a column; as few indices as hold SPREAD_MIN
    elements, one where one does), ours moves more elements than onnxruntime's own
    optimization moves there (SPREAD_COUNT, SLICE_SIGMAS) or, where it moves SPREAD_MIN of
    them, farther at the largest (SLICE_MAX); empty where no slice does. A flat output (a
    classifier's logits, another head's values beside them) is sliced in runs of SPREAD_MIN
    elements."""
    ours, theirs, slack = (np.asarray(a).reshape(np.shape(ours)) for a in (ours, theirs, slack))
    moved_o, moved_t = np.abs(ours) > slack, np.abs(theirs) > slack
    for axis, size in enumerate(ours.shape):
        per = ours.size // size if size else 0
        run = -(-SPREAD_MIN // per) if per else size
        if run >= size:  # one slice: the whole output
            continue
        rest = tuple(a for a in range(ours.ndim) if a != axis)
        starts = np.arange(0, size, run)
        mo, mt = (np.add.reduceat(m.sum(axis=rest), starts) for m in (moved_o, moved_t))
        big_o, big_t = (np.maximum.reduceat(np.abs(d).max(axis=rest), starts) for d in (ours, theirs))
        over = mo > SPREAD_COUNT * mt + SLICE_SIGMAS * np.sqrt(mt + 1)
        wide = (mt >= SPREAD_MIN) & (big_o > SLICE_MAX * big_t)
        for bad, why in ((over, "moves {o} of its elements where onnxruntime's own optimization moves {t}"),
                         (wide, "largest difference {bo:.3g} where onnxruntime's own optimization's is {bt:.3g}")):
            if bad.any():
                i = int(np.argmax(bad))
                at = f"{starts[i]}" if run == 1 else f"{starts[i]}..{min(starts[i] + run, size) - 1}"
                return f"at index {at} of axis {axis}: " + why.format(o=int(mo[i]), t=int(mt[i]), bo=float(big_o[i]),
                                                                          bt=float(big_t[i]))
    return ""


def _whole_unlike(ours: np.ndarray, theirs: np.ndarray, slack: np.ndarray) -> str:
    """spread_unlike over all elements of an output at once (flat arrays)."""
    n = ours.size
    moved_t = int(np.count_nonzero(np.abs(theirs) > slack))
    if moved_t < max(SPREAD_MIN, SPREAD_SHARE * n):
        return f"onnxruntime's own optimization moves {moved_t} of {n} elements: no rounding spread to measure by"
    moved_o = int(np.count_nonzero(np.abs(ours) > slack))
    if moved_o > SPREAD_COUNT * moved_t + 2 * np.sqrt(moved_t):
        return f"moves {moved_o} elements where onnxruntime's own optimization moves {moved_t}"
    big_o, big_t = float(np.abs(ours).max()), float(np.abs(theirs).max())
    if big_o > SPREAD_MAX * big_t:
        return f"largest difference {big_o:.3g} where onnxruntime's own optimization's is {big_t:.3g}"
    mean_o, mean_t = float(np.abs(ours).mean()), float(np.abs(theirs).mean())
    if mean_o > SPREAD_MEAN * mean_t:
        return f"mean difference {mean_o:.3g} where onnxruntime's own optimization's is {mean_t:.3g}"
    bias, limit = float(ours.mean()), abs(float(theirs.mean())) + 4 * float(ours.std()) / np.sqrt(n)
    if abs(bias) > limit:
        return f"shifted one way on average ({bias:.3g}), beyond rounding spread ({limit:.3g})"
    return ""


# integer outputs whose distance is a size: codes of the quantized types (any other integer, an
# ArgMax's index, is right or not), made by a QuantizeLinear (`code_outputs`): an ArgMax's index
# cast to uint8 (a segmentation model's class map) has a code's type and is an index
QUANTIZED_CODES = frozenset(np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16))
# ops whose output holds codes of their (first, or every) input's: they move, pick or repeat them
CODE_MOVERS = frozenset({"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Slice",
                         "Split", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "MaxPool", "DepthToSpace",
                         "SpaceToDepth", "Pad"})


def code_outputs(model: ModelProto) -> set[str]:
    """The graph outputs of `model` that hold quantization codes: made by a QuantizeLinear (or an
    op of onnxruntime's or ONNX's QLinear family, QGemm), or from those by CODE_MOVERS (from all
    the inputs of a Concat, from the first of the others)."""
    codes: set[str] = set()
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx", "com.microsoft"):
            continue
        data = [i for i in n.input if i] if n.op_type == "Concat" else list(n.input[:1])
        if n.op_type == "QuantizeLinear" or n.op_type.startswith(("QLinear", "QGemm")) or (
                n.op_type in CODE_MOVERS and data and all(i in codes for i in data)):
            codes.update(o for o in n.output if o)
    return {o.name for o in model.graph.output if o.name in codes}


class QdqAllowance:
    """Issue 30: in a quantized (QDQ) model, a rewrite that requantizes (DQ -> Conv -> Q into
    QLinearConv, ...) moves an output that rounds differently by a whole quantization step, far
    beyond verification's tolerance, and onnxruntime's own QDQ fusions move it so too. rules/qdq.egg
    makes such rewrites only where onnxruntime's own transformers make them; here an output of a
    model with QuantizeLinear nodes that differs beyond the tolerance passes where it is no
    farther from the original (all finite) than the original run with onnxruntime's graph
    optimizations on (ORT_ENABLE_ALL, less QDQ_UNSOUND_TRANSFORMERS), on the same inputs:
    element by element, plus 4 float32 ulps of that element's magnitude (the same number of
    quantization steps, each rounded by float32 a few ulps apart), or else as rounding spread
    (spread_unlike: where onnxruntime's own optimization moves many elements, ours moves as many,
    as far, without a bias, over the whole output and in each of its slices along an axis); an
    integer output other than codes of the quantized types (an ArgMax's index, also one cast to
    uint8: codes are what `code_outputs` finds) only where each element is the original's or
    onnxruntime's own. Only for outputs that a QuantizeLinear
    reaches (`quantized_outputs`):
    a float output beside them is held to the tolerance. Never by an output's largest difference
    alone: one element of 1e8 would give every other element 4 ulps of it as slack, and one
    element onnxruntime moves by a step would let every other element move by as much. Not for
    models run in stages."""

    codes: set[str] | None = None  # code_outputs; None (an allowance made without __init__): by type alone

    def __init__(self, original: ModelProto, files, announce: Callable[[str], None] = lambda step: None) -> None:
        # requantization needs a QuantizeLinear: a weight-only model (DequantizeLinear of int4
        # weights) is not requantized by any rewrite, and onnxruntime's own MatMulNBits fusion of
        # it quantizes activations (accuracy level 4), far looser than any rewrite of eqsat's
        self.active = any(n.op_type == "QuantizeLinear" and n.domain in ("", "ai.onnx") for n in original.graph.node)
        # where onnxruntime's own fusions are no rounding change, what they move is no measure
        self.withheld = qdq_allowance_withheld(original) if self.active else ""
        self.kept_out = qdq_kept_out(original) if self.active and not self.withheld else {}
        self.quantized = quantized_outputs(original) if self.active else set()
        self.codes = code_outputs(original) if self.active else set()
        self.original = original
        self.source = files[0] or original
        self.disabled: list[str] | None = None  # the reference run's, once `_reference` has run
        self.sess = None
        self.used: list[str] = []
        self.announce = announce  # verification's progress (the isolated child reports it)

    def _reference(self) -> None:
        """The model of the reference run (`source`) and the transformers it runs without
        (`disabled`): with kept_out's nodes written as float ops (eqsat.verification.qdq_float),
        so that onnxruntime fuses nothing through them, and then without any of FLOAT_FOLDS;
        `withheld` says why where one cannot be written."""
        if self.disabled is not None:
            return
        if self.kept_out:
            try:
                self.source = as_float_ops(self.original, set(self.kept_out))
            except Exception as e:  # noqa: BLE001 - no reference run then, and no allowance
                why = str(e) if isinstance(e, NotWritable) else f"its reference model could not be made ({e})"
                self.withheld = f"{next(iter(self.kept_out.values()))}, and {why}"
        # with nodes written as float ops, every float fold: onnxruntime folded a written-out
        # Q's Div by a scale of 1e-39 into a MatMul's alpha (inf) through the Cast before it
        folds = FLOAT_FOLDS if self.kept_out else float_folds_withheld(self.original)
        self.disabled = QDQ_UNSOUND_TRANSFORMERS + ALLOWANCE_WITHHELD_FUSIONS + list(folds)

    def _own(self, f: dict[str, np.ndarray]) -> dict[str, object] | None:
        try:
            if self.sess is None:
                self.announce("load original, onnxruntime-optimized")
                self.sess = session(self.source, optimize=True, disabled_optimizers=self.disabled,
                                    config=QDQ_ALLOWANCE_CONFIG)
            names = [o.name for o in self.sess.get_outputs()]
            self.announce("run original, onnxruntime-optimized")
            return dict(zip(names, self.sess.run(names, f), strict=True))
        except Exception:  # noqa: BLE001 - no allowance then
            return None

    def kept_out_note(self) -> str:
        """What the reference run leaves out, for a message (empty where nothing)."""
        if not self.kept_out:
            return ""
        first = next(iter(self.kept_out.values()))
        more = f" (and {len(self.kept_out) - 1} more)" if len(self.kept_out) > 1 else ""
        return (f"onnxruntime's fusions through {len(self.kept_out)} QuantizeLinear/DequantizeLinear nodes left "
                f"out of that measure: {first}{more}")

    def filter(self, bad: list[Mismatch], expected: dict, got: dict, f: dict[str, np.ndarray]) -> list[Mismatch]:
        """The mismatches that remain after the allowance."""
        if not bad or not self.active:
            return bad
        self._reference()
        if self.withheld:  # a program with fewer requantizing fusions may pass (eqsat.api.finish)
            return [Mismatch(m.output, f"{m.detail}; no QDQ allowance: {self.withheld}", requantized=True)
                    for m in bad]
        own = self._own(f)
        if own is None:
            return bad
        still = []
        for m in bad:
            e, g, o = (np.asarray(d[m.output]) if m.output in d else None for d in (expected, got, own))
            if (m.output not in self.quantized or e is None or g is None or o is None
                    or not e.shape == g.shape == o.shape or e.size == 0
                    or not all(np.issubdtype(a.dtype, np.number) and np.isfinite(a).all() for a in (e, g, o))):
                still.append(m)
                continue
            codes = e.dtype in QUANTIZED_CODES and (self.codes is None or m.output in self.codes)
            if not (np.issubdtype(e.dtype, np.floating) or codes):  # an index
                off = (g != e) & (g != o)
                if off.any():
                    at = tuple(int(i) for i in np.argwhere(off)[0])
                    still.append(Mismatch(m.output, f"{m.detail}; at {int(off.sum())} elements neither the "
                                                    f"original's nor onnxruntime's own, first at {at}: {g[at]} where "
                                                    f"they are {e[at]} and {o[at]}", requantized=True))
                else:
                    self.used.append(f"'{m.output}' onnxruntime's own at each element")
                continue
            e, g, o = (a.astype(np.float64) for a in (e, g, o))
            ours, theirs = np.abs(g - e), np.abs(o - e)
            # the same number of quantization steps can differ by float32 rounding of the step
            slack = 4 * float(np.finfo(np.float32).eps) * np.maximum(np.abs(e), np.abs(o))
            beyond = ours > theirs + slack
            if not beyond.any():
                self.used.append(f"'{m.output}' {float(ours.max()):.3g} <= {float(theirs.max()):.3g}")
                continue
            unlike = spread_unlike(g - e, o - e, slack)
            if not unlike:
                self.used.append(f"'{m.output}' spread as onnxruntime's (largest {float(ours.max()):.3g}, "
                                 f"{float(theirs.max()):.3g})")
                continue
            at = tuple(int(i) for i in np.argwhere(beyond)[0])
            note = f" ({kept})" if (kept := self.kept_out_note()) else ""
            still.append(Mismatch(m.output, f"{m.detail}; farther than onnxruntime's own optimization of the "
                                            f"original moves it at {int(beyond.sum())} of them, first at {at}: "
                                            f"{ours[at]:.3g} where it moves {theirs[at]:.3g}; {unlike}{note}",
                                  requantized=True))
        return still

    def describe(self) -> str:
        return ("QDQ model: outputs beyond the tolerance no farther from the original than onnxruntime's own "
                "optimization of it, at each element or as rounding spread (largest difference, ours and "
                "onnxruntime's: "
                + ", ".join(self.used[:4])
                + (", ..." if len(self.used) > 4 else "") + ")"
                + (f"; {kept}" if (kept := self.kept_out_note()) else ""))


# Scales of a QDQ model where onnxruntime's own fusions differ from the float form by rounding
# alone (rules/qdq.egg's qdq-requant-scale): products and sums of DQ's values stay finite and
# normal, and so do the fused kernels' ratios of scales. An int32 DequantizeLinear (a bias) is
# scaled by x_scale * w_scale: the range squared.
REQUANT_SCALE_RANGE = (2.0 ** -60, 2.0 ** 30)
# what _QdqGraph folds to learn a scale computed from constants: ops whose output is no larger
# than their inputs broadcast together (not ConstantOfShape, Expand, Tile, Range), each input of
# at most FOLD_ELEMENTS elements
FOLD_ELEMENTS = 1024
FOLD_OPS = frozenset({
    "Abs", "Add", "Cast", "CastLike", "Ceil", "Clip", "Concat", "Constant", "Div", "Erf", "Exp", "Flatten", "Floor",
    "Gather", "Identity", "Log", "Max", "Mean", "Min", "Mul", "Neg", "Pow", "Reciprocal", "ReduceMax", "ReduceMean",
    "ReduceMin", "ReduceProd", "ReduceSum", "Relu", "Reshape", "Round", "Sigmoid", "Sign", "Slice", "Sqrt", "Squeeze",
    "Sub", "Sum", "Tanh", "Transpose", "Unsqueeze", "Where"})
# ops whose QDQ fusion adds the bias (input 2) in the accumulator's integers
BIASED_QDQ_OPS = ("Conv", "ConvTranspose", "Gemm")
# ops that onnxruntime's QDQ propagation moves a DequantizeLinear past (their first input's
# values moved, not changed): a fusion after them reads the DequantizeLinear before them
DQ_MOVERS = frozenset({"Identity", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"})


def quantized_outputs(model: ModelProto) -> set[str]:
    """The graph outputs of `model` that a QuantizeLinear reaches: computed from one's output,
    or from a node whose subgraphs or local function hold one (a requantizing rewrite moves
    nothing else)."""
    from eqsat.core.scopes import implicit_inputs, subgraphs

    funcs = {(f.domain, f.name): f for f in model.functions}

    def holds_q(nodes, seen: frozenset = frozenset()) -> bool:
        for n in nodes:
            if n.op_type == "QuantizeLinear" and n.domain in ("", "ai.onnx"):
                return True
            if any(holds_q(sub.node, seen) for a in n.attribute for sub in subgraphs(a)):
                return True
            key = (n.domain, n.op_type)
            if key in funcs and key not in seen and holds_q(funcs[key].node, seen | {key}):
                return True
        return False

    reached: set[str] = set()
    for n in model.graph.node:
        if holds_q([n]) or any(i in reached for i in list(n.input) + implicit_inputs(n)):
            reached.update(o for o in n.output if o)
    return {o.name for o in model.graph.output if o.name in reached}


def qdq_allowance_withheld(model: ModelProto) -> str:
    """Why onnxruntime's own optimization of `model` is no measure at all of what a requantizing
    rewrite may move (empty where it is one): a QuantizeLinear or DequantizeLinear inside a
    subgraph or a local function (`qdq_kept_out` reads the main graph; onnxruntime fused a
    DQ -> Add -> Q with an output scale of 0 in an If branch and in a function, and the
    allowance took it), or the scale of one computed from constants that onnxruntime folds and
    this check cannot (its fusions may then take any scale, `qdq_kept_out` cannot tell)."""
    nested = _nested_qdq(model)
    if nested:
        return (f"{nested} holds a QuantizeLinear or DequantizeLinear, which this check does not read (it reads "
                "the main graph; onnxruntime fuses there too)")
    return _QdqGraph(model.graph).unfoldable_scale()


def _nested_qdq(model: ModelProto) -> str:
    """Where a subgraph (an If branch, a Loop or Scan body, at any depth) or a local function of
    `model` holds a QuantizeLinear or DequantizeLinear; empty where none does."""
    from eqsat.core.scopes import all_graphs, subgraphs

    def holds(nodes) -> bool:
        bodies = [g for n in nodes for a in n.attribute for b in subgraphs(a) for g in all_graphs(b)]
        return any(_QdqGraph.qdq(n) for n in nodes) or any(_QdqGraph.qdq(n) for g in bodies for n in g.node)

    for n in model.graph.node:
        if any(holds(b.node) for a in n.attribute for b in subgraphs(a)):
            return f"a subgraph of {n.op_type} '{n.name or n.output[0]}'"
    for f in model.functions:
        if holds(f.node):
            return f"the local function {f.domain}.{f.name}"
    return ""


def qdq_kept_out(model: ModelProto) -> dict[str, str]:
    """The QuantizeLinear and DequantizeLinear nodes of `model` (by output, each with why) through
    which onnxruntime's own fusions compute otherwise than the float form, not a rounding apart:
    the allowance's reference run has them written as float ops (eqsat.verification.qdq_float),
    so that it fuses nothing through them and every other fusion stays its measure. They are:
    a node whose constant scale lies outside REQUANT_SCALE_RANGE (zero, negative, subnormal,
    huge: onnxruntime fused DQ -> Add -> Q with a zero output scale or scales of 6.8e36, and
    moved codes by up to 255, the float form overflowing where its kernel does not); the
    DequantizeLinear inputs of a Conv, ConvTranspose, Gemm, MatMul + Add or Gemm + Sum
    (`_biased`) that onnxruntime fuses with a bias it changes: an int32 bias, not all zeros, at
    another scale than x_scale * w_scale (QGemm adds it at x_scale * w_scale) or a float bias
    rounded to integers of x_scale * w_scale above a tenth of the output's step (a Gemm's output
    moved 178 and 41 steps, a Conv's 38); the DequantizeLinear before an AveragePool with
    ceil_mode 1 and count_include_pad 1, which onnxruntime's QLinearAveragePool counts otherwise
    (up to 87 steps); each DequantizeLinear found directly or through ops of DQ_MOVERS; a
    QuantizeLinear or DequantizeLinear with per-axis scales other than a weight's along its
    output channels or a bias's, which onnxruntime's fusions read as one per output channel or
    one in all (up to 44 steps). With any of them in its reference, the allowance accepted any
    program as far off."""
    g = _QdqGraph(model.graph)
    kept: dict[str, str] = {}
    for node, why in (*g.scales_out_of_range(), *g.bias_changed(), *g.pool_miscounted(), *g.per_axis_misread()):
        kept.setdefault(node.output[0], why)
    return kept


def float_folds_withheld(model: ModelProto) -> list[str]:
    """The float fusions of onnxruntime that fold a factor outside FOLD_FACTOR_RANGE, or into a
    product with constant operands outside FOLD_WEIGHT_RANGE, somewhere in `model` (names of its
    transformers, in the order of FLOAT_FOLDS): the QDQ allowance's reference run leaves them
    out, as their results there differ from the original's by more than rounding."""
    found = _QdqGraph(model.graph).extreme_folds()
    return [t for t in FLOAT_FOLDS if t in found]


FLOAT_FOLDS = ("MatMulScaleFusion", "MatmulBNFusion", "ConvMulFusion", "ConvBNFusion", "ConvAddFusion")


class _QdqGraph:
    """The constants, producers and readers of a graph's values, for qdq_allowance_withheld and qdq_kept_out."""

    def __init__(self, graph) -> None:
        from eqsat.core.encode import NotTyped, constant_node_tensor
        from eqsat.core.scopes import implicit_inputs

        self.nodes = list(graph.node)
        self.consts: dict[str, object] = {t.name: t for t in graph.initializer}
        for n in self.nodes:
            if n.op_type != "Constant" or not n.output:
                continue
            try:
                t = constant_node_tensor(n)  # each of its forms (value, value_float, value_floats, ...)
            except NotTyped:  # several attributes, or an unknown one: not a constant known here
                continue
            if t is not None:
                self.consts[n.output[0]] = t
        self.producer = {o: n for n in self.nodes for o in n.output}
        self.folded: dict[str, np.ndarray | None] = {}
        # the values computed from a graph input or a random node (in graph order: ONNX's is topological)
        self.dependent = {i.name for i in graph.input if i.name not in self.consts}
        for n in self.nodes:
            if n.op_type in RANDOM_OPS or any(i in self.dependent for i in list(n.input) + implicit_inputs(n)):
                self.dependent.update(n.output)
        self.readers: dict[str, list] = {}
        for n in self.nodes:
            for i in n.input:
                self.readers.setdefault(i, []).append(n)

    def value(self, name: str) -> np.ndarray | None:
        """The constant `name`'s array: stored in the model, or computed from stored constants
        by nodes of small inputs (FOLD_ELEMENTS), as onnxruntime's constant folding computes
        it before its QDQ fusions (an output scale of Identity(0) or 0 * 1 is a scale of 0
        there); None where it is not known here."""
        t = self.consts.get(name)
        if isinstance(t, np.ndarray):
            return t
        if isinstance(t, onnx.TensorProto):
            if t.data_location == onnx.TensorProto.EXTERNAL:
                return None
            try:
                return onnx.numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001 - an unreadable constant: not known
                return None
        if name not in self.folded and self.computed_from_constants(name):
            self._fold(name)
        return self.folded.get(name)

    def computed_from_constants(self, name: str) -> bool:
        """Whether `name` is computed by nodes from constants alone (onnxruntime folds it)."""
        return name in self.producer and name not in self.dependent

    def _fold(self, name: str) -> None:
        """Computes `name` and the values it needs (in graph order, without recursion: a
        constant computation may be thousands of nodes deep) into `folded`; None for each
        that a node of another domain, a subgraph, a large input or the reference evaluator's
        refusal leaves unknown."""
        from onnx.reference import ReferenceEvaluator

        needed, todo = set(), [name]
        while todo:
            n = self.producer.get(todo.pop())
            if n is None or id(n) in needed:
                continue
            needed.add(id(n))
            todo += [i for i in n.input if i and i not in self.consts and i not in self.folded]
        graphs = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in self.nodes:
            if id(n) not in needed:
                continue
            ins = [self.value(i) if i else None for i in n.input]
            outs = None
            small = all(not i or (v is not None and v.size <= FOLD_ELEMENTS) for i, v in zip(n.input, ins, strict=True))
            if n.domain in ("", "ai.onnx") and n.op_type in FOLD_OPS and small and not any(
                    a.type in graphs for a in n.attribute):
                try:
                    outs = ReferenceEvaluator(n).run(None, {i: v for i, v in zip(n.input, ins, strict=True) if i})
                except Exception:  # noqa: BLE001 - an op the reference cannot compute: not known
                    outs = None
            for k, o in enumerate(n.output):
                self.folded[o] = np.asarray(outs[k]) if outs is not None and k < len(outs) else None

    @staticmethod
    def attrs(n) -> dict:
        return {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}

    @staticmethod
    def qdq(n) -> bool:
        return n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.domain in ("", "ai.onnx")

    def dq_of(self, name: str):
        """The DequantizeLinear that computes `name`, directly or through ops of DQ_MOVERS
        (onnxruntime's QDQ propagation moves a DequantizeLinear past them before its fusions);
        None where none does."""
        n = self.producer.get(name)
        for _ in range(len(self.nodes)):
            if n is None or n.op_type not in DQ_MOVERS or n.domain not in ("", "ai.onnx") or not n.input:
                break
            n = self.producer.get(n.input[0])
        return n if n is not None and self.qdq(n) and n.op_type == "DequantizeLinear" else None

    def dq_scale(self, name: str) -> np.ndarray | None:
        """The constant scale of the DequantizeLinear that computes `name` (`dq_of`), in float32."""
        d = self.dq_of(name)
        if d is None or len(d.input) < 2:
            return None
        s = self.value(d.input[1])
        return None if s is None else s.astype(np.float32)

    def unfoldable_scale(self) -> str:
        for n in self.nodes:
            if self.qdq(n) and len(n.input) > 1 and self.value(n.input[1]) is None \
                    and self.computed_from_constants(n.input[1]):
                return (f"the scale of {n.op_type} '{n.name or n.output[0]}' is computed from constants that "
                        "onnxruntime folds and this check cannot (its fusions may take any scale)")
        return ""

    def scales_out_of_range(self):
        """(node, why) of each QuantizeLinear and DequantizeLinear of a constant scale outside
        REQUANT_SCALE_RANGE (squared for an int32 DequantizeLinear: a bias)."""
        lo, hi = REQUANT_SCALE_RANGE
        for n in self.nodes:
            s = self.value(n.input[1]) if self.qdq(n) and len(n.input) > 1 else None
            if s is None or s.size == 0 or s.dtype.kind != "f":
                continue
            x = self.value(n.input[0])
            wide = n.op_type == "DequantizeLinear" and x is not None and x.dtype == np.int32
            a = np.abs(s.astype(np.float64))
            if not (np.isfinite(a).all() and (s > 0).all()
                    and a.min() >= (lo * lo if wide else lo) and a.max() <= (hi * hi if wide else hi)):
                yield n, (f"the scale of {n.op_type} '{n.name or n.output[0]}' is not positive within [2^-60, 2^30] "
                          "(onnxruntime's fusions there compute other values than the float form, not a rounding "
                          "apart)")

    def _dq_inputs(self, *names: str) -> list:
        """The DequantizeLinear nodes that compute `names` (`dq_of`)."""
        return [d for d in (self.dq_of(i) for i in names) if d is not None]

    def bias_changed(self):
        """(DequantizeLinear, why) of the inputs of each product that onnxruntime fuses with its
        bias changed (see qdq_kept_out)."""
        for n, a, b, bias, out in self._biased():
            qs = [self.value(q.input[1]) for q in self.readers.get(out, []) if self.qdq(q) and len(q.input) > 1]
            sa, sb = self.dq_scale(a), self.dq_scale(b)
            if qs and sa is not None and sb is not None and not self._bias_kept(bias, sa * sb, qs):
                why = (f"onnxruntime fuses {n.op_type} '{n.name or n.output[0]}' with its bias changed (an int32 "
                       "bias not at x_scale * w_scale, or a float bias it rounds at x_scale * w_scale above a tenth "
                       "of the output's step)")
                for d in self._dq_inputs(a, b):
                    yield d, why

    def _biased(self):
        """(node, x, w, bias, output) of each product whose QDQ fusion adds a bias in the
        accumulator's integers: a Conv, ConvTranspose or Gemm with its bias, and a MatMul read
        only by an Add, or a Gemm without a bias read only by a Sum of two, of a bias onnxruntime
        takes (`_gemm_bias`): it makes the two a Gemm with that bias (MatMulAddFusion, a 3-D
        MatMul between Reshapes; GemmSumFusion) and then a QGemm."""
        for n in self.nodes:
            if n.domain not in ("", "ai.onnx") or len(n.input) < 2:
                continue
            if n.op_type in BIASED_QDQ_OPS and len(n.input) > 2 and n.input[2]:
                yield n, n.input[0], n.input[1], n.input[2], n.output[0]
                continue
            readers = self.readers.get(n.output[0], [])
            adder = {"MatMul": "Add", "Gemm": "Sum"}.get(n.op_type)
            if adder and len(readers) == 1 and readers[0].op_type == adder \
                    and readers[0].domain in ("", "ai.onnx") and len(readers[0].input) == 2:
                add = readers[0]
                bias = add.input[1] if add.input[0] == n.output[0] else add.input[0]
                if bias != n.output[0] and self._gemm_bias(bias):
                    yield n, n.input[0], n.input[1], bias, add.output[0]

    def _gemm_bias(self, name: str) -> bool:
        """Whether onnxruntime takes `name`, added to a MatMul, as QGemm's bias: an int32
        DequantizeLinear, or a float constant it quantizes (not an activation, nor an 8-bit
        DequantizeLinear: it leaves those Gemms unfused)."""
        d = self.producer.get(name)
        if d is not None and self.qdq(d):
            x = self.value(d.input[0]) if d.op_type == "DequantizeLinear" else None
            return x is not None and x.dtype == np.int32
        return name not in self.dependent

    def pool_miscounted(self):
        """(DequantizeLinear, why) before each AveragePool with ceil_mode 1 and count_include_pad 1:
        onnxruntime fuses it into QLinearAveragePool, which divides a window that ceil_mode
        adds past the end by another count than its float AveragePool (42 to 87 output steps
        apart): what its own optimization moves there is no rounding."""
        for n in self.nodes:
            if n.op_type != "AveragePool" or n.domain not in ("", "ai.onnx") or not n.input:
                continue
            a = self.attrs(n)
            d = self.dq_of(n.input[0])
            if a.get("ceil_mode", 0) and a.get("count_include_pad", 0) and d is not None:
                yield d, (f"onnxruntime fuses AveragePool '{n.name or n.output[0]}' (ceil_mode and count_include_pad) "
                          "into QLinearAveragePool, which counts a window past the end otherwise")

    def per_axis_misread(self):
        """(node, why) of each QuantizeLinear or DequantizeLinear with a scale per slice (more than one), other than
        a weight's DequantizeLinear along its output channels (a Conv's axis 0, a ConvTranspose's
        1, a Gemm's 0 with transB else 1, a MatMul's last) and a bias's: onnxruntime's QLinearConv
        and QGemm fusions take a 1-D weight scale as one per output channel whatever the axis (30
        to 44 output steps apart), and QLinearSoftmax a per-axis output scale as one (5 steps)."""
        for n in self.nodes:
            s = self.value(n.input[1]) if self.qdq(n) and len(n.input) > 1 else None
            if s is not None and s.size > 1 and not self._weight_along_outputs(n):
                yield n, (f"{n.op_type} '{n.name or n.output[0]}' has per-axis scales where onnxruntime's fusions "
                          "read one per output channel or one in all")

    def _weight_along_outputs(self, d) -> bool:
        """Whether the DequantizeLinear `d` is read only as weights along their output channels or
        as a bias (see per_axis_misread)."""
        readers = self.readers.get(d.output[0], [])
        if d.op_type != "DequantizeLinear" or not readers:
            return False
        axis = self.attrs(d).get("axis", 1)
        w = self.value(d.input[0])
        if w is None:
            return False
        axis %= max(w.ndim, 1)
        for r in readers:
            a = self.attrs(r)
            slot = [k for k, i in enumerate(r.input) if i == d.output[0]]
            out_axis = {"Conv": 0, "ConvTranspose": 1, "Gemm": 0 if a.get("transB", 0) else 1,
                        "MatMul": w.ndim - 1}.get(r.op_type)
            bias = slot == [2] and r.op_type in BIASED_QDQ_OPS and w.ndim == 1
            if r.domain not in ("", "ai.onnx") or out_axis is None or not (slot == [1] and axis == out_axis or bias):
                return False
        return True

    def extreme_folds(self) -> set[str]:
        """float_folds_withheld's transformers (unordered)."""
        out: set[str] = set()
        for n in self.nodes:
            matmul = n.op_type == "MatMul" and n.domain in ("", "ai.onnx") or \
                n.op_type == "FusedMatMul" and n.domain == "com.microsoft"
            if not (matmul or n.op_type == "Conv" and n.domain in ("", "ai.onnx")) or len(n.input) < 2:
                continue
            weights_out = not all(self._within(self.value(i), FOLD_WEIGHT_RANGE) for i in n.input[:2])
            after = list(self.readers.get(n.output[0], []))
            if matmul:
                after += [r for s in after if s.op_type == "Reshape" for r in self.readers.get(s.output[0], [])]
            scales = [self._factor(r, n.output[0]) for r in after if r.op_type in ("Mul", "Div")]
            if matmul:
                scales += [self._factor(self.producer.get(i), i) for i in n.input[:2]]
            bias = self.value(n.input[2]) if not matmul and len(n.input) > 2 and n.input[2] else None
            norms = [self._bn_factor(r, bias) for r in after if r.op_type == "BatchNormalization"]
            for folded, name in ((scales, "MatMulScaleFusion" if matmul else "ConvMulFusion"),
                                 (norms, "MatmulBNFusion" if matmul else "ConvBNFusion")):
                folded = [f for f in folded if f is not None]
                if folded and (weights_out or not all(self._within(f, FOLD_FACTOR_RANGE) for f in folded)):
                    out.add(name)
            if not matmul and any(self._cancels(bias, self._addend(r, n.output[0])) for r in after):
                out.add("ConvAddFusion")
        return out

    @staticmethod
    def _cancels(*terms: np.ndarray | None) -> bool:
        """Whether constants added in turn to a value (per channel: each a vector, or one
        element) cancel to less than FOLD_FACTOR_RANGE's lower end times the largest of them:
        the original's sum with the largest absorbed the value's low bits, which their folded
        sum keeps (a Conv bias of 1e8 and an Add of -1e8 left the original its outputs rounded
        to 8, moving 252 of 256 by up to 73 steps of the Q after them)."""
        if any(t is None for t in terms):
            return False
        try:
            flat = np.broadcast_arrays(*(np.asarray(t, np.float64).reshape(-1) for t in terms))
        except ValueError:  # not per channel: onnxruntime does not fold them
            return False
        big = np.max(np.abs(np.stack(flat)), axis=0)
        with np.errstate(invalid="ignore", over="ignore"):
            return bool(np.any(big > np.abs(np.sum(flat, axis=0)) / FOLD_FACTOR_RANGE[0]))

    def _addend(self, n, name: str) -> np.ndarray | None:
        """The float constant that the Add `n` adds to `name`, None for any other node."""
        if n.op_type != "Add" or n.domain not in ("", "ai.onnx") or len(n.input) != 2 or name not in n.input:
            return None
        c = self.value(n.input[1] if n.input[0] == name else n.input[0])
        return c if c is not None and c.dtype.kind == "f" else None

    @staticmethod
    def _within(v: np.ndarray | None, bounds: tuple[float, float]) -> bool:
        """Whether the nonzero magnitudes of a float constant lie within `bounds` (True for
        what is no float constant: a computed operand, an integer)."""
        if v is None or v.dtype.kind != "f" or v.size == 0:
            return True
        a = np.abs(v.astype(np.float64))
        a = a[a != 0]
        return bool(np.isfinite(a).all() and (a.size == 0 or (a.min() >= bounds[0] and a.max() <= bounds[1])))

    def _factor(self, n, name: str) -> np.ndarray | None:
        """The constant factor of a Mul by a constant, or of a Div of `name` by one (its
        reciprocal; zero for a zero divisor), that reads or computes `name`; None for any other node."""
        if n is None or n.op_type not in ("Mul", "Div") or n.domain not in ("", "ai.onnx") or len(n.input) != 2:
            return None
        if name in n.output:  # a factor before the product: the Mul or Div that computes its operand
            others = [i for k, i in enumerate(n.input) if self.value(i) is not None and (n.op_type == "Mul" or k == 1)]
        else:
            others = [i for k, i in enumerate(n.input) if i != name and (n.op_type == "Mul" or k == 1)]
        c = self.value(others[0]) if len(others) == 1 else None
        if c is None or c.dtype.kind != "f":
            return None
        if n.op_type == "Div":
            with np.errstate(divide="ignore"):
                c = np.where(c == 0, np.inf, 1.0 / c.astype(np.float64))
        return c.astype(np.float64)

    def _bn_factor(self, n, bias: np.ndarray | None) -> np.ndarray | None:
        """A BatchNormalization's constant factor k = scale / sqrt(var + epsilon), None where its
        parameters are not constants; inf (outside any range) where its folded bias
        (bias - mean) * k + B cancels (`_cancels`) in either sum (`bias`: the product's, if any)."""
        if n.domain not in ("", "ai.onnx") or len(n.input) < 5:
            return None
        scale, beta, mean, var = (self.value(i) for i in n.input[1:5])
        if any(v is None or v.dtype.kind != "f" for v in (scale, beta, mean, var)):
            return None
        eps = float(self.attrs(n).get("epsilon", 1e-5))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            k = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
            shifted = (0.0 if bias is None else bias.astype(np.float64)) - mean.astype(np.float64)
            if self._cancels(bias, -mean) or self._cancels(shifted * k, beta):
                return np.array([np.inf])
        return k

    def _bias_kept(self, name: str, product: np.ndarray, qs: list) -> bool:
        """Whether onnxruntime's fusion adds the bias `name` as it is: an int32 DequantizeLinear of
        zeros, or at the scale `product` (x_scale * w_scale), or a float bias whose rounding at
        `product` is below a tenth of each output scale in `qs`."""
        product = product.astype(np.float32)
        try:
            bias = self.producer.get(name)
            if bias is not None and bias.op_type == "DequantizeLinear":
                codes = [self.value(i) if i else np.zeros(1) for i in list(bias.input[:1]) + list(bias.input[2:3])]
                # a bias of zeros adds nothing at any scale (exporters share one among convs)
                if all(c is not None and not np.any(c) for c in codes):
                    return True
                cs = self.dq_scale(name)
                return cs is not None and bool(np.allclose(cs, product, rtol=1e-6, atol=0.0))
            top = float(np.max(np.abs(product)))
            return all(q is not None and q.size > 0 and top <= 0.1 * float(np.min(np.abs(q))) for q in qs)
        except ValueError:  # shapes that do not broadcast: no known scale
            return False
