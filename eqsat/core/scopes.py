"""Subgraph scopes: what the bodies of If, Loop and Scan read from the graphs around them.

ONNX lets a subgraph use any value of an enclosing graph by name, without an input for it.
Those reads are a node's implicit inputs: the encoder, the memory planner (lifetimes) and
the drawings treat them as inputs of the node that owns the subgraph.
"""

from __future__ import annotations

from onnx import AttributeProto, GraphProto, NodeProto


def subgraphs(a: AttributeProto) -> list[GraphProto]:
    """The graphs an attribute holds (GRAPH or GRAPHS), else none."""
    if a.type == AttributeProto.GRAPH:
        return [a.g]
    if a.type == AttributeProto.GRAPHS:
        return list(a.graphs)
    return []


def all_graphs(g: GraphProto) -> list[GraphProto]:
    """`g` and every body in it (If branches, Loop and Scan bodies, nested ones), `g` first."""
    out = [g]
    for n in g.node:
        for a in n.attribute:
            for body in subgraphs(a):
                out += all_graphs(body)
    return out


def graph_outer_refs(g: GraphProto) -> list[str]:
    """Names a subgraph reads from enclosing scopes (its nested subgraphs' included), in
    order of first use."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    defined |= {t.values.name for t in g.sparse_initializer}
    refs: list[str] = []
    seen: set[str] = set()

    def use(name: str) -> None:
        if name and name not in defined and name not in seen:
            seen.add(name)
            refs.append(name)

    for node in g.node:
        for i in node.input:
            use(i)
        for a in node.attribute:
            for sub in subgraphs(a):
                for r in graph_outer_refs(sub):
                    use(r)
        defined.update(o for o in node.output if o)
    return refs


def implicit_inputs(node: NodeProto, by_name: bool = False) -> list[str]:
    """Outer-scope names read by the node's subgraphs, each once, attributes in the node's
    order (or in name order with `by_name`, as the encoder keys them)."""
    attrs = sorted(node.attribute, key=lambda a: a.name) if by_name else list(node.attribute)
    out: list[str] = []
    for a in attrs:
        for sub in subgraphs(a):
            for r in graph_outer_refs(sub):
                if r not in out:
                    out.append(r)
    return out
