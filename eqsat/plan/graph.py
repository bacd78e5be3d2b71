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


def value_dependent_sizes(graph: Graph) -> dict[str, str]:
    """Tensors sized by the measuring run (shape_source `run`) whose shape may follow from
    input values: downstream of a node of VALUE_SHAPED_OPS that shape inference could not
    size (through any tensor, a Shape of one included). Maps each to the name of that node.
    Their sizes hold for the run's inputs only."""

    def run_sized(y: str) -> bool:
        t = graph.tensors.get(y)
        return t is not None and t.shape_source == "run"

    origin: dict[str, str] = {}
    for node in graph.nodes:  # the model's order is topological
        if node.op_type in VALUE_SHAPED_OPS and any(run_sized(y) for y in node.outputs):
            src = node.name
        else:
            src = next((origin[x] for x in node.inputs if x in origin), None)
        if src is not None:
            origin.update((y, src) for y in node.outputs)
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
    return Graph(nodes, tensors, tuple(o.name for o in g.output), generated, used_dims)
