"""`--explain`: for each node of the optimized model, the rules behind it and the original
nodes it replaced.

How it is computed (after extraction and decoding, from the saturated e-graph):

1. Provenance rows. With `--explain` the rules are loaded instrumented (eqsat.core.provenance):
   every e-node a rule builds gets a row (constructor, child e-classes, rule name). These
   rows are taken out of the serialized e-graph before extraction sees it.
2. E-classes. Every original value and every output value lies in an e-class. An output
   node is *kept* when an original node has the same op type, its outputs in the same
   e-classes and its inputs in the same e-classes (attributes are not compared); any other
   output node is *rewritten*.
3. The region of an output node n: start from the e-classes of n's outputs; an original
   node whose output lies in the region, and that is not kept, was *replaced* by n; its
   input e-classes join the region unless they are values of the output model (those are
   computed by other output nodes, or are n's own inputs). So the replaced nodes are the
   original subgraph between n's outputs and the values n reads. Layouts: a value computed
   channel-blocked (rules/layout.egg) is the NCHW value its reorder e-node joins it to, so a
   blocked op replaced the nodes of that NCHW value, and a ReorderInput/ReorderOutput in the
   output replaced none.
4. The rules of n: the rules with a row for an e-node of the region whose Op children all
   lie in the region, among n's inputs, or are leaves (constants, graph inputs, Absent):
   the e-nodes that compute n's value from n's inputs. The facts of n (listed apart, only
   for a node some rule built): the rules that asserted a relation about an e-class of the
   region (the pattern recognizers, `tf-layernorm-div`, `attention-core`, ...) and that one
   of n's rules read in its query, directly or through the queries of other fact rules
   (eqsat.core.provenance records which relations each rule reads and which asserts them).
   A rewritten node that replaced original nodes but that no rule built lists `oracle`: the
   oracles (eqsat/oracle: constant folding, symbolic shapes, If inlining) merged it with
   what it replaced (a Reshape whose Shape/Gather/Concat target became a constant).
5. Constants of the output that are not original initializers are explained the same way
   (original nodes folded into them; the folding oracle is listed as `constant-folding`).
   Original Constant nodes in no region became initializers. Other original nodes in no
   region computed nothing the outputs need: *removed*. A rule whose union merged such a
   node's value with an existing one (`Neg(Neg(x)) -> x`) built nothing, but recorded the
   e-node it matched: the node's own (its op, in its output's e-class). It is credited with
   the removal (`removed_by`, `rules_removing`), and so is every removed node that only
   removed nodes read.

Limits: the rules are those that built e-nodes in the region, not a proof that the chosen
e-node was derived through each of them: a rule that built an alternative in the region
which extraction did not take is listed too (an over-approximation), and a rule that
only added facts (shapes, relations) is never listed. A node whose inputs were all merged
with equal e-classes counts as kept even if its attributes changed. Subgraphs of
If/Loop/Scan are not looked into.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from onnx import ModelProto, NodeProto

from eqsat.core.provenance import FACT, LEAVES, PREFIX
from eqsat.extract import EGraph
from eqsat.extract.nchwc import REORDERS
from eqsat.lang.literals import parse_string
from eqsat.lang.ops import BY_CTOR, LITERAL_CTORS

FOLDING = "constant-folding"
ORACLE = "oracle"  # a rewritten node that no rule built: eqsat/oracle (folded constants and shapes)
# the ONNX ops the layout conversions decode to (node count's REORDERS are their constructors)
REORDER_OPS = {f"{BY_CTOR[c].domain}.{BY_CTOR[c].onnx_type}" for c in REORDERS}


def split_rows(data: dict) -> list[tuple[str, tuple[str, ...], str]]:
    """Remove the provenance rows from a serialized e-graph (in place) and return them as
    (constructor, child e-classes, rule); a fact row is (FACT, (e-class,), rule)."""
    nodes = data["nodes"]
    rows = []
    drop = [nid for nid, n in nodes.items() if n["op"].startswith(PREFIX) or n["op"] == FACT]
    for nid in drop:
        n = nodes[nid]
        kids = n["children"]
        rule = parse_string(nodes[kids[-1]]["op"])
        op = FACT if n["op"] == FACT else n["op"][len(PREFIX):]
        rows.append((op, tuple(nodes[c]["eclass"] for c in kids[:-1]), rule))
    names = {nodes[nid]["children"][-1] for nid in drop}  # the rule-name strings
    for nid in drop:
        del nodes[nid]
    used = {c for n in nodes.values() for c in n["children"]}
    drop = [nid for nid in names if nid not in used]
    classes = {nodes[nid]["eclass"] for nid in drop}
    for nid in drop:
        del nodes[nid]
    cd = data.get("class_data", {})
    for c in classes | {c for c in cd if c.startswith("@")}:  # relation rows' own classes
        cd.pop(c, None)
    return rows


def node_label(node: NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}#{index}"


@dataclass
class _Graphs:
    """What the steps of `explain` share: the saturated e-graph, the provenance rows by
    e-node, the original nodes by the e-classes of their values, and the e-classes the
    output model computes (which stop every region)."""

    egraph: EGraph
    by_enode: dict[tuple, set[str]]  # (constructor, child e-classes) -> the rules that built it
    onodes: list[NodeProto]  # the original nodes
    o_out: list[list[str | None]]  # e-classes of each original node's outputs
    o_in: list[list[str | None]]  # e-classes of each original node's inputs
    users: dict[str, list[int]]  # value name -> original nodes reading it
    by_out_class: dict[str, list[int]]  # e-class -> original nodes with an output in it
    live: set[str]  # e-classes of the output model's values, in either layout
    views: dict[str, set[str]]  # e-class -> the same tensor in the other layout
    kept: set[int] = field(default_factory=set)  # original nodes an output node keeps

    def leafish(self, c: str) -> bool:
        return any(self.egraph.nodes[i].op in LEAVES for i in self.egraph.classes.get(c, ()))

    def region(self, start: set[str]) -> tuple[list[int], set[str]]:
        """Step 3: the original nodes replaced by an output node whose outputs lie in the
        e-classes `start`, and the region's e-classes."""
        reg = set(start)
        todo = list(start)
        replaced: list[int] = []
        seen: set[int] = set()
        while todo:
            c = todo.pop()
            for k in self.by_out_class.get(c, ()):
                if k in seen or k in self.kept:
                    continue
                seen.add(k)
                replaced.append(k)
                for x in self.o_in[k] + self.o_out[k]:
                    if x is not None and x not in reg and x not in self.live:
                        reg.add(x)
                        todo.append(x)
        # Equal constants share an e-class: keep a Constant node only where a node it feeds is
        # replaced here (not the same constant of every other layer).
        keep = set(replaced)
        onodes, users = self.onodes, self.users
        replaced = [k for k in replaced if onodes[k].op_type != "Constant"
                    or any(u in keep and onodes[u].op_type != "Constant" for v in onodes[k].output for u in users[v])]
        return sorted(replaced), reg

    def facts_of(self, reg: set[str]) -> set[str]:
        return set().union(*(self.by_enode.get((FACT, (c,)), set()) for c in reg))

    def rules_of(self, reg: set[str], inputs: set[str]) -> set[str]:
        """Step 4: the rules that built an e-node of the region computing it from `inputs`."""
        egraph = self.egraph
        found: set[str] = set()
        for c in reg:
            for nid in egraph.classes.get(c, ()):
                e = egraph.nodes[nid]
                if nid.startswith("primitive-"):
                    continue
                ok = all(k in reg or k in inputs or egraph.class_type(k) != "Op" or self.leafish(k) for k in e.children)
                if ok:
                    found |= self.by_enode.get((e.op, e.children), set())
        return found


def explain(model: ModelProto, out: ModelProto, egraph: EGraph, choice: dict[str, str], decoder,
            value_names: dict[str, list[str]], rows: list, fact_uses: dict[str, set[str]] | None = None) -> dict:
    """The `explain` section of the report (see the module docstring). `fact_uses` (rule ->
    the fact rules its query reads, eqsat.core.provenance) narrows a node's facts to those its
    rules depended on; without it every fact about the region is listed."""
    out_classes, tuple_of, live, views = _output_classes(decoder, egraph)
    gr = _original_graph(model, egraph, rows, value_names, live, views)
    info = _match_output_nodes(out, gr, out_classes)
    nodes_out, attributed, per_rule, per_fact = _explain_nodes(info, gr, tuple_of, choice, fact_uses)
    constants = _explain_constants(gr, decoder, choice, attributed)
    return _report(gr, nodes_out, constants, attributed, per_rule, per_fact)


def _output_classes(decoder, egraph: EGraph):
    """The output model's values by e-class (step 2): output value name -> its e-classes,
    output value name -> the tuple e-class of its node, the e-classes the output computes
    (in either layout: `live`), and e-class -> the same tensor in the other layout."""
    out_classes: dict[str, set[str]] = defaultdict(set)  # output value name -> its e-classes
    for c, name in decoder.value.items():
        if name:
            out_classes[name].add(c)
    tuple_of: dict[str, str] = {}  # output value name -> tuple e-class of its node
    for t, names in decoder.tuple_outputs.items():
        for name in names:
            if name:
                tuple_of[name] = t
    live = set(decoder.value) | set(decoder.tuple_outputs)
    # The same tensor in another layout: a reorder e-node joins a blocked value's e-class and
    # its NCHW value's. An output node that computes a value blocked replaced the original
    # nodes of its NCHW form; a value computed in either layout stops every other region.
    views: dict[str, set[str]] = defaultdict(set)
    for e in egraph.nodes.values():
        if e.op in REORDERS and e.children:
            views[e.children[0]].add(e.eclass)
            views[e.eclass].add(e.children[0])
    live |= set().union(*(views.get(c, set()) for c in list(live)))
    return out_classes, tuple_of, live, views


def _original_graph(model: ModelProto, egraph: EGraph, rows: list, value_names: dict[str, list[str]],
                    live: set[str], views: dict[str, set[str]]) -> _Graphs:
    """The provenance rows by e-node (step 1) and the original nodes by the e-classes of
    their values (step 2)."""
    by_enode: dict[tuple, set[str]] = defaultdict(set)
    for op, kids, rule in rows:
        by_enode[(op, kids)].add(rule)
    orig_class: dict[str, str] = {name: c for c, names in value_names.items() for name in names}
    onodes = list(model.graph.node)
    o_out = [[orig_class.get(v) if v else None for v in n.output] for n in onodes]
    o_in = [[orig_class.get(v) if v else None for v in n.input] for n in onodes]
    users: dict[str, list[int]] = defaultdict(list)  # value name -> original nodes reading it
    for k, n in enumerate(onodes):
        for v in n.input:
            users[v].append(k)
    by_out_class: dict[str, list[int]] = defaultdict(list)
    for k, cs in enumerate(o_out):
        for c in cs:
            if c is not None:
                by_out_class[c].append(k)
    return _Graphs(egraph, by_enode, onodes, o_out, o_in, users, by_out_class, live, views)


def _match_output_nodes(out: ModelProto, gr: _Graphs, out_classes: dict[str, set[str]]) -> list[tuple]:
    """Step 2: for each output node, (node, e-classes of its outputs, e-classes of each input,
    whether it is an output alias, the original node it keeps or None); the kept original
    nodes are added to `gr.kept`."""
    outputs = {o.name for o in out.graph.output}
    info = []
    for n in out.graph.node:
        cls = [_one(out_classes.get(v)) if v else None for v in n.output]
        alias = n.op_type == "Identity" and n.output[0] in outputs and not out_classes.get(n.output[0])
        ins = [out_classes.get(v, set()) if v else set() for v in n.input]
        match = None
        if not alias:
            for k in gr.by_out_class.get(cls[0], ()) if cls and cls[0] else ():
                o = gr.onodes[k]
                if (o.op_type == n.op_type and (o.domain or "") in ((n.domain or ""), "ai.onnx")
                        and len(o.input) == len(n.input) and _same_outputs(gr.o_out[k], cls)
                        and all((a is None and not b) or a in b for a, b in zip(gr.o_in[k], ins, strict=True))):
                    match = k
                    break
        if match is not None:
            gr.kept.add(match)
        info.append((n, cls, ins, alias, match))
    return info


def _explain_nodes(info: list[tuple], gr: _Graphs, tuple_of: dict[str, str], choice: dict[str, str],
                   fact_uses: dict[str, set[str]] | None) -> tuple[list[dict], set[int], Counter, Counter]:
    """Steps 3 and 4 for every output node: its entry (status, rules, facts, replaced nodes),
    with the original nodes attributed to some output node and the per-rule and per-fact
    counts."""
    egraph = gr.egraph
    attributed: set[int] = set()
    per_rule: Counter = Counter()
    per_fact: Counter = Counter()
    nodes_out = []
    for n, cls, ins, alias, match in info:
        entry = {"name": n.name, "op": _op(n), "outputs": list(n.output)}
        if alias:
            entry.update(status="output-alias", rules=[], facts=[], replaced=[])
            nodes_out.append(entry)
            continue
        start = {c for c in cls if c}
        t = tuple_of.get(next((v for v in n.output if v), ""))
        if t:
            start.add(t)
        inputs = set().union(*ins) if ins else set()
        for c in start:
            ch = choice.get(c)
            if ch in egraph.nodes:
                inputs |= set(egraph.nodes[ch].children)
        if _op(n) in REORDER_OPS:  # a layout conversion replaces no original node
            replaced, reg = [], start
        else:
            replaced, reg = gr.region(start | set().union(*(gr.views.get(c, set()) for c in start)))
        rules = sorted(gr.rules_of(reg, inputs))
        if not rules and replaced and match is None:
            rules = [ORACLE]  # no rule built it: the oracles' unions (folded shapes) did
        facts = gr.facts_of(reg) - set(rules) if rules else set()
        if fact_uses is not None:
            facts &= set().union(*(fact_uses.get(r, set()) for r in rules))
        facts = sorted(facts)
        attributed.update(replaced)
        if match is not None:
            attributed.add(match)
        per_rule.update(rules)
        per_fact.update(facts)
        entry.update(status="kept" if match is not None else "rewritten", rules=rules, facts=facts,
                     replaced=[node_label(gr.onodes[k], k) for k in replaced])
        nodes_out.append(entry)
    return nodes_out, attributed, per_rule, per_fact


def _explain_constants(gr: _Graphs, decoder, choice: dict[str, str], attributed: set[int]) -> list[dict]:
    """Step 5: constants the output gained (folded), and what they replaced; the original
    nodes folded into them are added to `attributed`."""
    egraph, onodes = gr.egraph, gr.onodes
    constants = []
    for c, name in decoder.value.items():
        ch = choice.get(c)
        if not name or ch not in egraph.nodes or egraph.nodes[ch].op not in LITERAL_CTORS:
            continue
        replaced, reg = gr.region({c})
        replaced = [k for k in replaced if k not in attributed and onodes[k].op_type != "Constant"]
        if not replaced:
            continue
        attributed.update(replaced)
        rules = sorted(gr.rules_of(reg, set()) | {FOLDING})
        constants.append({"name": name, "rules": rules, "replaced": [node_label(onodes[k], k) for k in replaced]})
    return constants


def _report(gr: _Graphs, nodes_out: list[dict], constants: list[dict], attributed: set[int],
            per_rule: Counter, per_fact: Counter) -> dict:
    """Step 5's leftovers (original Constant nodes now initializers, removed nodes and the
    rules that removed them) and the section itself, summary first."""
    onodes = gr.onodes
    as_initializers = [k for k in range(len(onodes)) if k not in attributed and onodes[k].op_type == "Constant"]
    attributed.update(as_initializers)
    removed_ids = [k for k in range(len(onodes)) if k not in attributed]
    removed = [node_label(onodes[k], k) for k in removed_ids]
    credit = _removed_by(removed_ids, onodes, gr.o_out, gr.users, gr.egraph, gr.by_enode)
    per_removing: Counter = Counter(r for rules in credit.values() for r in rules)
    status = Counter(e["status"] for e in nodes_out)
    return {
        "summary": {
            "nodes_after": len(nodes_out),
            "kept": status.get("kept", 0),
            "rewritten": status.get("rewritten", 0),
            "output_aliases": status.get("output-alias", 0),
            "original_nodes_replaced": len({k for e in nodes_out for k in e["replaced"]}),
            "original_nodes_folded": sum(len(e["replaced"]) for e in constants),
            "original_constant_nodes_now_initializers": len(as_initializers),
            "original_nodes_removed": len(removed),
        },
        "rules": dict(sorted(per_rule.items(), key=lambda kv: (-kv[1], kv[0]))),
        "facts": dict(sorted(per_fact.items(), key=lambda kv: (-kv[1], kv[0]))),
        "nodes": nodes_out,
        "constants": constants,
        "removed": removed,
        # removed original node -> the rules that rewrote it away (or the nodes that read it)
        "removed_by": {node_label(onodes[k], k): sorted(credit[k]) for k in removed_ids if credit.get(k)},
        "rules_removing": dict(sorted(per_removing.items(), key=lambda kv: (-kv[1], kv[0]))),
        "method": "provenance rows of instrumented rules over the e-class region of each output node "
                  "(see eqsat/core/explain.py for what it can and cannot tell)",
    }


def _removed_by(removed: list[int], onodes: list, o_out: list, users: dict, egraph: EGraph,
                by_enode: dict) -> dict[int, set[str]]:
    """The rules behind each removed original node: a rule whose union merged the node's
    value with one that exists already (`Neg(Neg(x)) -> x`) builds nothing, and records the
    e-node it matched (eqsat.core.provenance): the node's own e-node, in its output's e-class
    with its op. A removed node no rule matched, whose readers were all removed, is credited
    with their rules: it was needed only by what they removed."""
    gone = set(removed)
    credit: dict[int, set[str]] = {}
    for k in removed:
        n, found = onodes[k], set()
        for c in o_out[k]:
            for nid in egraph.classes.get(c, ()) if c else ():
                e = egraph.nodes[nid]
                spec = BY_CTOR.get(e.op)
                if spec is not None and spec.onnx_type == n.op_type:
                    found |= by_enode.get((e.op, e.children), set())
        credit[k] = found
    for k in reversed(removed):  # a graph's nodes are in topological order: readers first
        if credit[k]:
            continue
        readers = {u for v in onodes[k].output if v for u in users.get(v, ())}
        if readers and readers <= gone:
            credit[k] = set().union(*(credit[u] for u in readers))
    return credit


def _one(classes: set[str] | None) -> str | None:
    return min(classes) if classes else None


def _same_outputs(orig: list, out: list) -> bool:
    if len(orig) < len([c for c in out if c]):
        return False
    return all(b is None or a == b for a, b in zip(orig, out, strict=False))


def _op(n: NodeProto) -> str:
    return (f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type


def format_text(ex: dict, limit: int | None = None) -> str:
    """The explanation for a terminal: summary, per-rule counts, then every output node that
    a rule produced or that replaced original nodes."""
    s = ex["summary"]
    lines = [
        f"explain: {s['nodes_after']} output nodes: {s['kept']} kept, {s['rewritten']} rewritten"
        + (f", {s['output_aliases']} output aliases" if s["output_aliases"] else "")
        + f"; original nodes: {s['original_nodes_replaced']} replaced, {s['original_nodes_folded']} folded "
        f"into constants, {s['original_nodes_removed']} removed",
        "",
        "rules (output nodes each contributed to):",
    ]
    if ex["rules"]:
        width = max(len(r) for r in ex["rules"])
        lines += [f"  {r:<{width}}  {k}" for r, k in ex["rules"].items()]
    else:
        lines.append("  (none)")
    if ex.get("rules_removing"):  # rules whose unions left original nodes unneeded
        lines += ["", "rules (original nodes each removed):"]
        width = max(len(r) for r in ex["rules_removing"])
        lines += [f"  {r:<{width}}  {k}" for r, k in ex["rules_removing"].items()]
    shown = [e for e in ex["nodes"] if e["rules"] or e["replaced"]]
    lines += ["", "nodes:"]
    for e in shown[:limit] if limit else shown:
        lines.append(f"  {e['op']} {e['name']} [{e['status']}]")
        lines.append(f"    rules:    {', '.join(e['rules']) or '-'}")
        if e["facts"]:
            lines.append(f"    facts:    {', '.join(e['facts'])}")
        lines.append(f"    replaced: {', '.join(e['replaced']) or '-'}")
    if limit and len(shown) > limit:
        lines.append(f"  ... {len(shown) - limit} more")
    if ex["constants"]:
        lines += ["", "constants:"]
        for e in ex["constants"]:
            lines.append(f"  {e['name']} <- {', '.join(e['replaced'])} ({', '.join(e['rules'])})")
    by = ex.get("removed_by", {})
    if ex["removed"]:
        shown = [f"{r} ({', '.join(by[r])})" if by.get(r) else r for r in ex["removed"]]
        lines += ["", f"removed (not needed by any output): {', '.join(shown)}"]
    return "\n".join(lines)
