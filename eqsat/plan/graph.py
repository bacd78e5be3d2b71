"""What the memory planner sees of a model: its nodes in the model's order, the
intermediate tensors with their byte sizes, and the graph outputs.

An *intermediate* is any value a node produces. Graph inputs and initializers are not
intermediates: the caller owns their memory (feeds, weights), so the planner never places
them in the arena. A graph output that a node produces is an intermediate that lives to the
end of the run.

A node's inputs here are its explicit inputs plus the values its subgraphs (If, Loop, Scan)
read from the enclosing scope: a subgraph's read of an outer value is a use by the node
that owns the subgraph.

Nodes without a name (or whose name repeats an earlier node's) get a generated one,
`OPTYPE_INDEX` with INDEX the node's position in the model's node list (plus `_2`, `_3`, ...
if that name is taken); `Graph.generated_names` lists them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx
from onnx import ModelProto

from eqsat.core.scopes import implicit_inputs
from eqsat.plan.errors import PlanError

# ops whose output shapes depend on input values, not only on input shapes
VALUE_SHAPED_OPS = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression", "If", "Loop", "TopK"})

# ops whose output shapes follow from their input shapes (and attributes) alone: standard
# ones, then onnxruntime's that eqsat writes
_STANDARD_SHAPE_OPS = ((
    "Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization BitShift "
    "BitwiseAnd BitwiseNot BitwiseOr BitwiseXor Cast CastLike Ceil Celu Clip Concat Conv ConvInteger "
    "ConvTranspose Cos Cosh DepthToSpace DequantizeLinear Div Dropout Einsum Elu Equal Erf Exp Flatten Floor "
    "Gather GatherElements GatherND Gelu Gemm GlobalAveragePool GlobalLpPool GlobalMaxPool Greater "
    "GreaterOrEqual GroupNormalization HardSigmoid HardSwish Hardmax Identity InstanceNormalization IsInf "
    "IsNaN LRN LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax LpNormalization LpPool MatMul "
    "MatMulInteger Max MaxPool Mean MeanVarianceNormalization Min Mish Mod Mul Neg Not Or PRelu Pow "
    "QLinearConv QLinearMatMul QuantizeLinear Reciprocal Relu Round Selu Shape Shrink Sigmoid Sign Sin "
    "Sinh Size Softmax Softplus Softsign SpaceToDepth Sqrt Sub Sum Tan Tanh ThresholdedRelu Transpose "
    "Trilu Where Xor"
).split())
_CONTRIB_SHAPE_OPS = {
    "com.microsoft": (
        "BiasGelu FastGelu FusedConv FusedGemm FusedMatMul Gelu MatMulNBits MultiHeadAttention NhwcMaxPool QGemm "
        "QLinearAdd QLinearAveragePool QLinearConcat QLinearConv QLinearGlobalAveragePool QLinearLeakyRelu "
        "QLinearMul QLinearSigmoid QLinearSoftmax QuickGelu RotaryEmbedding SkipLayerNormalization "
        "SkipSimplifiedLayerNormalization BiasAdd"
    ).split(),
    "com.microsoft.nchwc": "AveragePool Conv GlobalAveragePool GlobalMaxPool MaxPool ReorderInput ReorderOutput "
                           "Upsample".split(),
}
SHAPE_FOLLOWS_SHAPES = frozenset({*(("", op) for op in _STANDARD_SHAPE_OPS),
                                  *((d, op) for d, ops in _CONTRIB_SHAPE_OPS.items() for op in ops)})
# ops whose output shapes follow from the values at these input slots (and from input shapes)
SIZE_SLOTS: dict[tuple[str, str], tuple[int, ...]] = {
    ("", "Reshape"): (1,), ("", "Expand"): (1,), ("", "Tile"): (1,), ("", "ConstantOfShape"): (0,),
    ("", "Range"): (0, 1, 2), ("", "Slice"): (1, 2, 3, 4), ("", "Pad"): (1, 3), ("", "Resize"): (1, 2, 3),
    ("", "Upsample"): (1,), ("", "OneHot"): (1,), ("", "Split"): (1,), ("", "Squeeze"): (1,),
    ("", "Unsqueeze"): (1,), ("", "CenterCropPad"): (1, 2),
    **{("", op): (1,) for op in (
        "ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum "
        "ReduceSumSquare").split()},
}


@dataclass(frozen=True)
class Node:
    name: str
    op_type: str
    domain: str = ""
    inputs: tuple[str, ...] = ()  # distinct non-empty input names, explicit then implicit
    outputs: tuple[str, ...] = ()  # non-empty output names
    input_slots: tuple[str, ...] = ()  # the explicit inputs as written ("" for a missing optional)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    size: int  # bytes, unaligned
    producer: int  # index in Graph.nodes
    elem_type: int = 0  # onnx TensorProto enum; 0 in abstract graphs (tests)
    shape: tuple[int, ...] = ()
    shape_source: str = "inferred"  # inferred (onnx shape inference) | run (one onnxruntime run)


@dataclass
class Graph:
    nodes: list[Node]
    tensors: dict[str, TensorInfo]  # the intermediates
    outputs: tuple[str, ...] = ()  # graph output names (only intermediates matter)
    generated_names: list[str] = field(default_factory=list)
    dims: dict[str, int] = field(default_factory=dict)  # symbolic dimensions bound for the sizes
    fed: frozenset[str] = frozenset()  # values the caller feeds: graph inputs, overridable defaults included
    consumers: dict[str, list[int]] = field(init=False)  # tensor -> node indices reading it

    def __post_init__(self) -> None:
        self.consumers = {t: [] for t in self.tensors}
        for i, n in enumerate(self.nodes):
            for x in n.inputs:
                if x in self.consumers:
                    self.consumers[x].append(i)
        seen: set[str] = set()
        for i, n in enumerate(self.nodes):
            for x in n.inputs:
                if x in self.tensors and self.tensors[x].producer >= i:
                    raise PlanError(
                        f"the model's node order is not topological: node '{n.name}' (step {i}) reads "
                        f"'{x}' before node '{self.nodes[self.tensors[x].producer].name}' produces it"
                    )
            for y in n.outputs:
                if y in seen:
                    raise PlanError(f"value '{y}' is produced twice (second time by node '{n.name}')")
                seen.add(y)

    def index(self) -> dict[str, int]:
        """Node name -> index."""
        return {n.name: i for i, n in enumerate(self.nodes)}


def node_names(nodes: Iterable[onnx.NodeProto]) -> tuple[list[str], list[str]]:
    """Unique node names: the model's where given and unique, else generated. Returns
    (names, generated)."""
    nodes = list(nodes)
    given = {n.name for n in nodes if n.name}
    used: set[str] = set()
    names: list[str] = []
    generated: list[str] = []
    for i, n in enumerate(nodes):
        if n.name and n.name not in used:
            name = n.name
        else:
            base = f"{n.op_type}_{i}"
            name, k = base, 1
            while name in given or name in used:
                k += 1
                name = f"{base}_{k}"
            generated.append(name)
        used.add(name)
        names.append(name)
    return names, generated


def _reads_fed_values(node: Node, fed: set[str]) -> bool:
    """Whether the shape of `node`'s outputs may follow from the values in `fed` it reads:
    at the slots of SIZE_SLOTS for the ops there, at any input for ops of neither table."""
    if (node.domain, node.op_type) in SHAPE_FOLLOWS_SHAPES:
        return False
    slots = SIZE_SLOTS.get((node.domain, node.op_type))
    if slots is not None:
        return any(k < len(node.input_slots) and node.input_slots[k] in fed for k in slots)
    return any(x in fed for x in node.inputs)


def value_dependent_sizes(graph: Graph) -> dict[str, str]:
    """Tensors sized by the measuring run (shape_source `run`) whose shape may follow from
    input values: downstream of a node of VALUE_SHAPED_OPS that shape inference could not
    size (through any tensor, a Shape of one included), or of a node that shape inference
    could not size and that reads a value the caller feeds, or one computed from such values
    (`Graph.fed`; Shape and Size give shapes only), where its output's shape may follow
    from it: Expand(r, s) with s an input was sized by the run's random s. Maps each to the
    name of that node. Their sizes hold for the run's inputs only."""

    def run_sized(y: str) -> bool:
        t = graph.tensors.get(y)
        return t is not None and t.shape_source == "run"

    fed = set(graph.fed)  # values computed from what the caller feeds
    origin: dict[str, str] = {}
    for node in graph.nodes:  # the model's order is topological
        unsized = any(run_sized(y) for y in node.outputs)
        if unsized and (node.op_type in VALUE_SHAPED_OPS or _reads_fed_values(node, fed)):
            src = node.name
        else:
            src = next((origin[x] for x in node.inputs if x in origin), None)
        if src is not None:
            origin.update((y, src) for y in node.outputs)
        if not (node.domain == "" and node.op_type in ("Shape", "Size")) and any(x in fed for x in node.inputs):
            fed.update(node.outputs)
    return {y: src for y, src in origin.items() if run_sized(y)}


def graph_from_model(model: ModelProto, dims: dict[str, int] | None = None) -> Graph:
    """The planner's view of `model`: node order, intermediates with sizes (see
    `eqsat.plan.sizes.tensor_types` for how shapes are found and dims are bound)."""
    from eqsat.plan.sizes import tensor_types

    types, used_dims = tensor_types(model, dims or {})
    g = model.graph
    names, generated = node_names(g.node)
    nodes: list[Node] = []
    tensors: dict[str, TensorInfo] = {}
    for i, (n, name) in enumerate(zip(g.node, names, strict=True)):
        ins: list[str] = []
        for x in [*n.input, *implicit_inputs(n)]:
            if x and x not in ins:
                ins.append(x)
        outs = tuple(y for y in n.output if y)
        nodes.append(Node(name, n.op_type, n.domain if n.domain != "ai.onnx" else "", tuple(ins), outs, tuple(n.input)))
        for y in outs:
            t = types[y]
            tensors[y] = TensorInfo(y, t.size, i, t.elem_type, t.shape, t.source)
    fed = frozenset(i.name for i in g.input)
    return Graph(nodes, tensors, tuple(o.name for o in g.output), generated, used_dims, fed)
