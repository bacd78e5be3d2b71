"""The saturated e-graph as egraph-serialize JSON plus eqsat's metadata.

Added to egglog's JSON:
- `class_data[C]["shape"]` (a list of dims, negative = symbolic) and `["dtype"]` (a DType
  constructor name) for every Op e-class whose shape or dtype is known;
- a top-level `"eqsat"` object: `format`, `constructors` (the term constructors: every
  other function node is an analysis table, not a term), `functions`, `roots` (the output
  e-classes, one per graph output, in order, duplicates kept), `outputs` (their names),
  `dims` (symbolic dimension id -> name) and `value_class` (encoded value number -> its
  e-class, from the `(Value N)` handles); eqsat.core.pipeline adds `settings` and `input_nodes`
  (the e-node that encodes each node of the input model: the input program,
  whose work bounds extraction's where `input_complete` says every input node was matched,
  extract/work.py).
This is the file `--save-egraph` writes and the input of everything in `extract/`.
"""

from __future__ import annotations

import hashlib
import json
import math

from egglog import bindings as b

from eqsat.core.shapes import DimTable
from eqsat.core.store import ProtoStore
from eqsat.lang import terms as T
from eqsat.lang.literals import parse_int

FORMAT = 1


def serialize(eg: b.EGraph, root_ids: list[int], output_names: list[str], constructors: list[str],
              functions: list[str], dims: DimTable, protos: ProtoStore | None = None,
              forbidden: list[str] = ()) -> dict:
    """`root_ids`: the value numbers (eqsat.core.encode) of the graph outputs, in order."""
    ser = eg.serialize([T.value(v) for v in dict.fromkeys(root_ids)])
    data = _canonical_primitives(json.loads(ser.to_json()))
    nodes = data["nodes"]
    value_class: dict[str, str] = {}  # value number -> e-class, from the (Value N) handles
    for n in nodes.values():
        if n["op"] == "Value" and len(n["children"]) == 1:
            value_class[str(parse_int(nodes[n["children"][0]]["op"]))] = n["eclass"]
    cdata = data.setdefault("class_data", {})

    def ints_of(eclass: str) -> list[int] | None:
        for nid in by_class.get(eclass, ()):
            n = nodes[nid]
            if nid.startswith("primitive-") and n["op"] == "vec-of":
                return [parse_int(nodes[c]["op"]) for c in n["children"]]
            if nid.startswith("primitive-") and n["op"] == "vec-empty":
                return []
        return None

    def ctor_of(eclass: str) -> str | None:
        for nid in by_class.get(eclass, ()):
            op = nodes[nid]["op"]
            if op in ctor_set:
                return op
        return None

    ctor_set = set(constructors)
    by_class: dict[str, list[str]] = {}
    for nid, n in nodes.items():
        by_class.setdefault(n["eclass"], []).append(nid)
    for n in nodes.values():
        if n["op"] == "shape" and len(n["children"]) == 1:
            owner = nodes[n["children"][0]]["eclass"]
            dimsv = ints_of(n["eclass"])
            if dimsv is not None:
                cdata.setdefault(owner, {})["shape"] = dimsv
        elif n["op"] == "dtype" and len(n["children"]) == 1:
            owner = nodes[n["children"][0]]["eclass"]
            d = ctor_of(n["eclass"])
            if d is not None:
                cdata.setdefault(owner, {})["dtype"] = d
    _mark_padding(nodes, by_class, cdata)
    _mark_dequantized(nodes, by_class, cdata)
    weights = _subgraph_weights(nodes, protos) if protos is not None else {}
    roots = [value_class[str(v)] for v in root_ids]
    data["root_eclasses"] = list(dict.fromkeys(roots))
    data["eqsat"] = {
        "format": FORMAT,
        "constructors": sorted(constructors),
        "functions": sorted(functions),
        "roots": roots,
        "outputs": list(output_names),
        "dims": {str(k): v for k, v in dims.names.items()},
        "value_class": value_class,
        "forbidden": sorted(forbidden),
        "node_weight": weights,
    }
    return data


def _canonical_primitives(data: dict) -> dict:
    """egglog numbers a primitive leaf (a String, an i64, ...) and its e-class by an id
    interned per process, so the same model saturated second in a process got other ids than
    in a fresh one, and another digest (a choice file or program set made in one was refused
    in the other). Each leaf is renamed by its sort and value, which fix it: ids, e-class
    names, children and class_data follow."""
    nodes = data["nodes"]
    rename: dict[str, str] = {}
    classes: dict[str, str] = {}
    for nid, n in nodes.items():
        if nid.startswith("primitive-") and not n["children"]:
            sort = n["eclass"].rsplit("-", 1)[0]
            key = hashlib.sha256(f"{sort}\0{n['op']}".encode()).hexdigest()[:16]
            rename[nid] = f"primitive-{sort}-{key}"
            classes[n["eclass"]] = f"{sort}-{key}"
    if len(set(rename.values())) != len(rename) or len(set(classes.values())) != len(classes):
        return data  # two leaves of one sort and value: egglog's own ids kept
    out = {}
    for nid, n in nodes.items():
        out[rename.get(nid, nid)] = {**n, "eclass": classes.get(n["eclass"], n["eclass"]),
                                     "children": [rename.get(c, c) for c in n["children"]]}
    data["nodes"] = out
    if "class_data" in data:
        data["class_data"] = {classes.get(c, c): v for c, v in data["class_data"].items()}
    data["root_eclasses"] = [classes.get(c, c) for c in data.get("root_eclasses", [])]
    return data


PADDING_OPS = ("PadChannels", "ReorderFilter")  # eqsat's internal ops, which extraction never sees


def _mark_padding(nodes: dict, by_class: dict[str, list[str]], cdata: dict) -> None:
    """class_data[c]["unpadded_elements"]: for a weight that a rule padded with zeros
    (PadChannels, possibly under ReorderFilter), the elements it had before. The internal
    ops are left out of extraction's view of the e-graph; the work report reads this
    (extract/work.py, padding_flops)."""
    memo: dict[str, float | None] = {}

    def elements(c: str) -> float | None:
        s = cdata.get(c, {}).get("shape")
        return None if s is None or any(d < 0 for d in s) else float(math.prod(s))

    def unpadded(c: str, depth: int = 6) -> float | None:
        if c in memo or depth <= 0:
            return memo.get(c)
        memo[c] = None
        for nid in by_class.get(c, ()):
            n = nodes[nid]
            if n["op"] in PADDING_OPS and n["children"]:
                inner = nodes[n["children"][0]]["eclass"]
                found = unpadded(inner, depth - 1)
                if found is None and n["op"] == "PadChannels":
                    found = elements(inner)
                if found is not None:
                    memo[c] = found
                    break
        return memo[c]

    for c in by_class:
        if (kept := unpadded(c)) is not None and (full := elements(c)) is not None and kept < full:
            cdata.setdefault(c, {})["unpadded_elements"] = kept


def _mark_dequantized(nodes: dict, by_class: dict[str, list[str]], cdata: dict) -> None:
    """class_data[c]["dequantized"]: True for a value a DequantizeLinear computes, and for a
    filter that PadChannels and ReorderFilter make of one (the blocked Conv's, whose internal
    ops extraction never sees): eqsat.core.requantize retries a QDQ model with such convs NCHW."""
    marked = {n["eclass"] for n in nodes.values() if n["op"] == "DequantizeLinear"}
    parents: dict[str, list[str]] = {}
    for n in nodes.values():
        if n["op"] in PADDING_OPS and n["children"]:
            parents.setdefault(nodes[n["children"][0]]["eclass"], []).append(n["eclass"])
    todo = list(marked)
    while todo:
        for p in parents.get(todo.pop(), ()):
            if p not in marked:
                marked.add(p)
                todo.append(p)
    for c in marked:
        if c in by_class:
            cdata.setdefault(c, {})["dequantized"] = True


def _subgraph_weights(nodes: dict, protos: ProtoStore) -> dict[str, int]:
    """Node id -> 1 + the nodes of its subgraphs, for If and graph-carrying opaque ops: a
    cost model that counts nodes must see what an If still costs to run."""
    from eqsat.lang.literals import parse_string

    def graph_nodes(key: str) -> int:
        g = protos.graphs.get(key)
        return len(g.graph.node) if g else 0

    out: dict[str, int] = {}
    for nid, n in nodes.items():
        if n["op"] == "If":
            out[nid] = 1 + sum(graph_nodes(parse_string(nodes[c]["op"])) for c in n["children"][1:3])
    return out
