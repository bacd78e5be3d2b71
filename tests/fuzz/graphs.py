"""Building blocks of drawn models: typed values, a graph builder, and a drawn case with the
feeds it is run on.

Shapes are tuples whose entries are ints or the string "N", a symbolic dimension whose
size a feed chooses (1, 2, 3 or 5): every op a generator adds is valid for each size. A
dimension "?" is one the generator does not know (a caller may feed the shape it comes
from); a shape None, a rank it does not know. Only element-wise unary ops, casts and
Unsqueeze take such values.
A value is `exact` when rounding cannot have touched it (graph inputs, constants, and ops
such as Relu, Neg, Transpose, Max of exact values): only exact values feed discontinuous
ops (Floor, comparisons, casts to integers), whose results a legitimate reordering of
float arithmetic could otherwise flip.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx.printer
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

F32, I64, I32, BOOL = TP.FLOAT, TP.INT64, TP.INT32, TP.BOOL
NP = {F32: np.float32, I64: np.int64, I32: np.int32, BOOL: np.bool_}
SIZES = (2, 1, 3, 5)  # the symbolic dimension's size in feed 0, 1, 2, ...
SYM = "N"
UNK = "?"  # a dimension whose size the generator does not know (an overridable shape decides it)


@dataclass
class Val:
    name: str
    elem: int
    shape: tuple
    exact: bool = True
    index_bound: int = 0  # > 0: an integer value valid as an index into an axis of this size


@dataclass
class InputSpec:
    """A graph input that is not an initializer: how its feeds are drawn (integers uniform
    in [lo, hi], floats normal times `scale`)."""

    name: str
    elem: int
    shape: tuple
    lo: int = -5
    hi: int = 5
    scale: float = 1.0


def concrete(shape: tuple, n: int) -> tuple[int, ...]:
    return tuple(n if d == SYM else d for d in shape)


def broadcast(a: tuple, b: tuple) -> tuple | None:
    """numpy's broadcast of two shapes valid for every size of N, or None."""
    r = max(len(a), len(b))
    a, b = (1,) * (r - len(a)) + a, (1,) * (r - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def numel(shape: tuple) -> int | None:
    return None if SYM in shape else int(np.prod(shape, dtype=np.int64))


class Builder:
    """Nodes, initializers and inputs of one graph (or If branch), and the pool of values
    the generators draw operands from."""

    def __init__(self, rng: np.random.Generator, opset: int, prefix: str = "") -> None:
        self.rng, self.opset, self.prefix = rng, opset, prefix
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[InputSpec] = []
        self.overridable: dict[str, list[np.ndarray]] = {}  # initializer name -> values to feed it
        self.pool: list[Val] = []
        self.functions: list[onnx.FunctionProto] = []
        self.domains: dict[str, int] = {}
        self.n = 0

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"{self.prefix}{stem}{self.n}"

    def add(self, v: Val) -> Val:
        self.pool.append(v)
        return v

    def input(self, elem: int, shape: tuple, lo: int = -5, hi: int = 5, scale: float = 1.0,
              index_bound: int = 0) -> Val:
        name = self.fresh("in")
        self.inputs.append(InputSpec(name, elem, tuple(shape), lo, hi, scale))
        return self.add(Val(name, elem, tuple(shape), True, index_bound))

    def const(self, array, elem: int | None = None, alts: list | None = None, as_node: bool = False,
              pool: bool = False) -> Val:
        """An initializer holding `array` (of type `elem`); with `alts`, also a graph input a
        caller may feed those values instead; `as_node`: a Constant node instead."""
        elem = elem or (F32 if np.asarray(array).dtype.kind == "f" else I64)
        a = np.asarray(array, NP[elem])
        name = self.fresh("c")
        t = numpy_helper.from_array(a, name)
        if as_node and not alts:
            self.nodes.append(h.make_node("Constant", [], [name], value=t))
        else:
            self.inits.append(t)
            if alts:  # same shape, or (where a caller may feed another shape) same rank
                self.overridable[name] = [np.asarray(x, NP[elem]).reshape(a.shape if np.size(x) == a.size else
                                                                           np.shape(x)) for x in alts]
        v = Val(name, elem, a.shape, True)
        return self.add(v) if pool else v

    def ints(self, values, alts=None) -> str:
        return self.const(np.asarray(values, np.int64), I64, alts).name

    def scalar(self, x: float, alts=None) -> str:
        return self.const(np.float32(x), F32, alts).name

    def weight(self, shape, scale: float | None = None, positive: bool = False, overridable: bool = False,
               broadcast_alt: bool = False) -> str:
        """A random float constant; `overridable`: also a graph input fed another value, and
        with `broadcast_alt` one of all-ones shape too (it broadcasts as the default does:
        the input declares symbolic dimensions)."""
        fan = int(shape[0]) if len(shape) else 1
        s = scale if scale is not None else 1.0 / np.sqrt(max(fan, 1))
        a = self.rng.standard_normal(shape).astype(np.float32) * np.float32(s)
        if positive:
            a = np.abs(a) + np.float32(0.5)
        alts = None
        if overridable:
            b = self.rng.standard_normal(shape).astype(np.float32) * np.float32(s)
            alts = [np.abs(b) + np.float32(0.5) if positive else b]
            if broadcast_alt and a.size > 1:
                alts.append(np.full((1,) * len(shape), 1.5, np.float32))
        return self.const(a, F32, alts).name

    def node(self, op: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs) -> list[str]:
        outs = [self.fresh(op.lower()) for _ in range(n_out)]
        self.nodes.append(h.make_node(op, inputs, outs, domain=domain or None, **attrs))
        return outs

    def op(self, op: str, inputs: list[str], elem: int, shape: tuple, exact: bool = False, **attrs) -> Val:
        """One node with one output, added to the pool."""
        (out,) = self.node(op, inputs, **attrs)
        return self.add(Val(out, elem, None if shape is None else tuple(shape), exact))

    def graph_proto(self, name: str, outputs: list[Val], inputs: list[onnx.ValueInfoProto] | None = None,
                    declare_shapes: bool = True) -> onnx.GraphProto:
        ins = inputs if inputs is not None else [
            h.make_tensor_value_info(i.name, i.elem, list(i.shape)) for i in self.inputs]
        for n, alts in self.overridable.items():
            t = next(t for t in self.inits if t.name == n)
            dims = [d if all(a.shape[i] == d for a in alts) else f"{n}_{i}" for i, d in enumerate(t.dims)]
            ins.append(h.make_tensor_value_info(n, t.data_type, dims))
        outs = [h.make_tensor_value_info(v.name, v.elem, [None if d == UNK or not declare_shapes else d
                                                          for d in v.shape])
                for v in outputs]
        return h.make_graph(self.nodes, name, ins, outs, self.inits)


@dataclass
class Case:
    """A drawn model, the options it is optimized with and how it is fed."""

    model: onnx.ModelProto
    inputs: list[InputSpec]
    overridable: dict[str, list[np.ndarray]]
    seed: int
    options: dict = field(default_factory=dict)  # eqsat.core.pipeline.Options fields
    runnable: bool = True  # onnxruntime can run the model itself (no unknown custom op)
    custom_ops: dict = field(default_factory=dict)  # (domain, op) -> FunctionProto defining it for comparison
    feeds_count: int = 4

    def feeds(self, k: int) -> dict[str, np.ndarray]:
        """Feed k: fresh random inputs at the k-th size of N; from feed 1 on, the overridable
        initializers are fed one of their other values."""
        rng = np.random.default_rng(self.seed * 7919 + k)
        n = SIZES[k % len(SIZES)]
        out: dict[str, np.ndarray] = {}
        for i in self.inputs:
            shape = concrete(i.shape, n)
            if i.elem == BOOL:
                out[i.name] = np.asarray(rng.random(shape) < 0.5)
            elif i.elem in (I64, I32):
                out[i.name] = np.asarray(rng.integers(i.lo, i.hi + 1, size=shape), NP[i.elem])
            else:
                out[i.name] = np.asarray(rng.standard_normal(shape) * i.scale, np.float32)
        if k:
            for name, alts in self.overridable.items():
                out[name] = alts[(k - 1) % len(alts)]
        return out

    def __repr__(self) -> str:
        over = {k: [a.tolist() for a in v] for k, v in self.overridable.items()}
        return (f"Case(seed={self.seed}, options={self.options}, overridable={over},\n"
                f"inputs={[(i.name, i.shape, i.lo, i.hi) for i in self.inputs]},\n"
                f"model=\n{onnx.printer.to_text(self.model)})")


def ir_version(opset: int) -> int:
    """The IR version onnx pairs with a default-domain opset (overridable initializers need >= 4)."""
    return {13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10}.get(opset, 10)


class Gen:
    """A builder driven by hypothesis draws: templates ask it for choices and operands."""

    def __init__(self, draw, b: Builder, custom: bool = False) -> None:
        from hypothesis import strategies as st

        self.st, self.draw, self.b, self.custom = st, draw, b, custom

    def choice(self, seq):
        return self.draw(self.st.sampled_from(list(seq)))

    def flag(self, pct: int) -> bool:
        """True with about `pct` percent probability (shrinks to False)."""
        return self.draw(self.st.integers(0, 99)) >= 100 - pct

    def int(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))

    def pick(self, pred=None) -> Val | None:
        """A pool value satisfying `pred`, the most recent ones more often (deep chains)."""
        cands = [v for v in self.b.pool if pred is None or pred(v)]
        if not cands:
            return None
        k = min(self.int(0, len(cands) - 1), self.int(0, len(cands) - 1))
        return cands[len(cands) - 1 - k]


def known(v: Val) -> bool:
    """Whether the generator knows v's shape."""
    return v.shape is not None and UNK not in v.shape


def is_float(v: Val) -> bool:
    return v.elem == F32 and known(v)


def is_int(v: Val) -> bool:
    return v.elem in (I64, I32) and known(v)
