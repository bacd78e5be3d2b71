"""A serialized e-graph: egraph-serialize JSON as written by egglog, indexed for extraction.

In egglog's JSON, `children` are node ids (a child's e-class is that node's `eclass`);
primitives (i64, f64, String, vec-of) are nodes too; function and relation tables
(`shape`, `dtype`, ...) also appear as nodes, in the e-class of their output. Only
constructor and primitive nodes are terms: `EGraph.extractable` says which, from the
constructor list in eqsat's metadata (top-level key "eqsat").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from .schema import FORMAT, validate

__all__ = ["FORMAT", "EGraph", "Node"]


@dataclass(frozen=True)
class Node:
    id: str
    op: str
    eclass: str
    children: tuple[str, ...]  # child e-classes, in argument order
    cost: float = 1.0


@dataclass
class EGraph:
    nodes: dict[str, Node]
    classes: dict[str, list[str]]  # e-class -> its extractable node ids
    roots: list[str]  # e-classes that must be chosen
    class_data: dict[str, dict] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)  # eqsat's metadata, or {}

    @classmethod
    def from_json(cls, data: dict | str | Path, trusted: bool = False) -> EGraph:
        """The e-graph of egraph-serialize JSON: a dict, JSON text, or the path of a file
        holding it. Checked first (extract.schema.validate), unless `trusted` (eqsat's own
        serialization, read in the same process): EGraphFormatError names a bad field,
        NewerFormatError a file a newer eqsat wrote (both ValueErrors); reading a file
        raises what reading and json.loads raise."""
        if isinstance(data, (str, Path)) and not str(data).lstrip().startswith("{"):
            data = json.loads(Path(data).read_text())
        elif isinstance(data, str):
            data = json.loads(data)
        if not trusted:
            validate(data)
        raw = data["nodes"]
        meta = data.get("eqsat", {})
        ctors = set(meta.get("constructors", ())) - set(meta.get("forbidden", ()))
        skip = set(meta.get("functions", ())) | set(meta.get("forbidden", ()))
        nodes: dict[str, Node] = {}
        classes: dict[str, list[str]] = {}
        for n in raw.values():
            classes.setdefault(n["eclass"], [])
        for nid, n in raw.items():
            if n.get("subsumed"):
                continue
            if ctors:
                ok = nid.startswith("primitive-") or n["op"] in ctors
            else:
                ok = n["op"] not in skip
            if not ok:
                continue
            kids = tuple(raw[c]["eclass"] for c in n["children"])
            nodes[nid] = Node(nid, n["op"], n["eclass"], kids, float(n.get("cost", 1.0)))
            classes[n["eclass"]].append(nid)
        roots = list(meta.get("roots") or data.get("root_eclasses", []))
        return cls(nodes, classes, roots, data.get("class_data", {}), meta)

    def digest(self) -> str:
        """A fingerprint of the extractable nodes (id, op, e-class, child classes) and the
        roots: equal for e-graphs on which the same choice means the same program (a choice
        file records it, and `eqsat optimize --choice` compares it)."""
        h = hashlib.sha256()
        for nid in sorted(self.nodes):
            n = self.nodes[nid]
            h.update(json.dumps([nid, n.op, n.eclass, n.children]).encode())
        h.update(json.dumps(self.roots).encode())
        return h.hexdigest()[:16]

    def parents(self) -> dict[str, list[str]]:
        """e-class -> ids of the nodes that have it as a child."""
        out: dict[str, list[str]] = {c: [] for c in self.classes}
        for n in self.nodes.values():
            for c in set(n.children):
                out[c].append(n.id)
        return out

    def class_type(self, eclass: str) -> str:
        return self.class_data.get(eclass, {}).get("type", "")
