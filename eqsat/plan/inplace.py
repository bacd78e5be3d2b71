"""In-place reuse and views: which tensors share another tensor's buffer.

Inference only (no gradients keep old values alive).

**Views.** Reshape, Squeeze, Unsqueeze, Flatten and Identity do not move data: their
output is their input's bytes under another shape. When the input is an intermediate, the
output shares its buffer (`alias_kind: "view"`); the buffer then lives until the last use
of either. A view of a graph input or an initializer gets a buffer of its own (a copy:
the arena never points into memory the caller owns).

**In-place.** An element-wise op computes output element i from input element i only
(broadcast inputs are read, never written), so its output may be written over one of its
inputs. The contract: *an in-place op must be the last use of its input*. The output takes
input x's buffer when

- the op allows it for that input (the table below), and x is an intermediate;
- x's buffer dies at this op: no later node reads x or anything sharing x's buffer, and x
  is not a graph output;
- x and the output have the same size in bytes and the same element type (a Cast is
  in-place only when it casts to the same type);
- no other output of the node already took that buffer.

Ops and the inputs they may overwrite: the unary element-wise ops (Relu, Sigmoid, Tanh,
Erf, Neg, Sqrt, Exp, Log, Abs, ..., LeakyRelu, Elu, Selu, HardSigmoid, Softplus, Gelu, ...)
input 0; the binary and variadic ones (Add, Sub, Mul, Div, Pow, Min, Max, Sum, Mean, PRelu,
And, Or, Xor, Mod, BitShift, Bitwise*) any input; Clip input 0; Where inputs 1 and 2;
Cast input 0 (same type only); onnxruntime's com.microsoft FusedConv input 3 (Z, the added
tensor: onnxruntime's kernel declares that output 0 may reuse it), BiasGelu, FastGelu,
Gelu, QuickGelu input 0, BiasAdd inputs 0 and 2.
"""

from __future__ import annotations

from dataclasses import dataclass

from eqsat.plan.graph import Graph, Node
from eqsat.plan.lifetimes import Buffer, align

VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})

_UNARY = (
    "Abs Acos Acosh Asin Asinh Atan Atanh BitwiseNot Ceil Celu Cos Cosh Elu Erf Exp Floor Gelu "
    "HardSigmoid HardSwish LeakyRelu Log Mish Neg Not Reciprocal Relu Round Selu Shrink Sigmoid "
    "Sign Sin Sinh Softplus Softsign Sqrt Tan Tanh ThresholdedRelu"
).split()
_NARY = (
    "Add Sub Mul Div Pow Min Max Sum Mean PRelu And Or Xor Mod BitShift BitwiseAnd BitwiseOr BitwiseXor"
).split()

# (domain, op_type) -> input slots the output may overwrite; None: any input
INPLACE: dict[tuple[str, str], tuple[int, ...] | None] = {
    **{("", op): (0,) for op in _UNARY},
    **{("", op): None for op in _NARY},
    ("", "Clip"): (0,),
    ("", "Where"): (1, 2),
    ("", "Cast"): (0,),
    ("com.microsoft", "FusedConv"): (3,),
    ("com.microsoft", "BiasGelu"): (0,),
    ("com.microsoft", "FastGelu"): (0,),
    ("com.microsoft", "Gelu"): (0,),
    ("com.microsoft", "QuickGelu"): (0,),
    ("com.microsoft", "BiasAdd"): (0, 2),
}


@dataclass(frozen=True)
class Alias:
    parent: str  # the tensor whose buffer this one takes
    kind: str  # view | inplace


def _slots(node: Node) -> tuple[str, ...]:
    return node.input_slots or node.inputs


def inplace_inputs(node: Node) -> list[str]:
    """The inputs `node`'s first output may overwrite, by the table above."""
    key = (node.domain, node.op_type)
    if key not in INPLACE or not node.outputs:
        return []
    slots = _slots(node)
    allowed = INPLACE[key]
    idx = range(len(slots)) if allowed is None else [k for k in allowed if k < len(slots)]
    return [slots[k] for k in idx if slots[k]]


def aliases(graph: Graph, order: list[int], life: dict[str, tuple[int, int]], inplace: bool = True,
            views: bool = True) -> dict[str, Alias]:
    """Decide, walking `order`, which outputs share a buffer: tensor -> Alias."""
    out: dict[str, Alias] = {}
    owner: dict[str, str] = {}  # tensor -> owner of its buffer
    last: dict[str, int] = {}  # owner -> last step any member of the buffer is live
    T = graph.tensors
    for s, i in enumerate(order):
        node = graph.nodes[i]
        taken: set[str] = set()
        for y in node.outputs:
            owner[y] = y
            last[y] = life[y][1]
        if not node.outputs:
            continue
        y = node.outputs[0]
        slots = _slots(node)
        if views and node.domain == "" and node.op_type in VIEW_OPS and slots and slots[0] in T:
            x = slots[0]
            if T[x].size == T[y].size:
                r = owner[x]
                out[y] = Alias(x, "view")
                owner[y] = r
                del last[y]
                last[r] = max(last[r], life[y][1])
            continue
        if not inplace:
            continue
        for x in inplace_inputs(node):
            if x not in T:
                continue
            r = owner[x]
            if r in taken or last[r] != s:
                continue
            if T[x].size != T[y].size or T[x].elem_type != T[y].elem_type:
                continue
            out[y] = Alias(x, "inplace")
            owner[y] = r
            del last[y]
            last[r] = max(s, life[y][1])
            taken.add(r)
            break
    return out


def buffers(graph: Graph, life: dict[str, tuple[int, int]], alias: dict[str, Alias], alignment: int) -> list[Buffer]:
    """Group tensors by the buffer they live in; buffers in the order of their owners."""
    owner: dict[str, str] = {}
    groups: dict[str, Buffer] = {}
    # parents come before children in production order, so one pass in tensor order works
    for t in sorted(graph.tensors, key=lambda t: (life[t][0], t)):
        a = alias.get(t)
        if a is None:
            owner[t] = t
            groups[t] = Buffer(t, [t], align(graph.tensors[t].size, alignment), *life[t])
        else:
            r = owner[t] = owner[a.parent]
            b = groups[r]
            b.members.append(t)
            b.start = min(b.start, life[t][0])
            b.end = max(b.end, life[t][1])
    return list(groups.values())
