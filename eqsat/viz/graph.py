"""Drawing ONNX graphs: a layered layout by topological depth, rendered as inline SVG, and
a self-contained HTML page around it (no network, no JavaScript, no Graphviz).

The drawn graph is a `Drawing`: boxes (nodes of the model, graph inputs and outputs) and
edges between them (values, those a node's subgraphs read from the graph around them among
them; initializers are not drawn, a node's tooltip lists them). A box's `state` is "same",
"changed", "added" or "removed" and picks its colour, so one drawing can show two models at
once (eqsat.viz.diffing builds that).

Layout: a box's layer is the longest path to it from a box with no inputs; within a layer,
boxes are ordered by the mean position of their producers (one top-down sweep), which keeps
most chains straight. Cycles (possible only in a merged drawing) are broken by ignoring
the edges that close them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from onnx import ModelProto, NodeProto

from eqsat.core.scopes import implicit_inputs
from eqsat.viz.histogram import op_name

BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 170, 40, 24, 46, 20
COLORS = {  # state -> (fill, stroke)
    "same": ("#f2f2f2", "#8c8c8c"),
    "changed": ("#fcefd4", "#c78a00"),
    "added": ("#d9f2d9", "#2e8b2e"),
    "removed": ("#f9d6d5", "#c0392b"),
    "io": ("#e3ecf7", "#4a6fa5"),
}


@dataclass
class Box:
    id: str
    label: str  # first line: the op (or the input / output name)
    sub: str = ""  # second line: the node's name
    state: str = "same"
    title: str = ""  # tooltip
    shape: str = "rect"  # rect | ellipse (graph inputs and outputs)


@dataclass
class Drawing:
    boxes: dict[str, Box] = field(default_factory=dict)
    edges: list[tuple[str, str, str]] = field(default_factory=list)  # (from box, to box, value name)


def model_drawing(model: ModelProto, state: str = "same") -> Drawing:
    """Every node of the main graph, its graph inputs (not initializers) and outputs."""
    d = Drawing()
    g = model.graph
    inits = {t.name for t in g.initializer}
    producer: dict[str, str] = {}
    for i in g.input:
        if i.name not in inits:
            d.boxes[f"in:{i.name}"] = Box(f"in:{i.name}", i.name, "input", "io", f"graph input {i.name}", "ellipse")
            producer[i.name] = f"in:{i.name}"
    for k, n in enumerate(g.node):
        bid = f"n{k}"
        d.boxes[bid] = node_box(bid, n, inits, state)
        for o in n.output:
            if o:
                producer[o] = bid
    for k, n in enumerate(g.node):
        for v in reads(n):
            if v in producer:
                d.edges.append((producer[v], f"n{k}", v))
    for o in g.output:
        d.boxes[f"out:{o.name}"] = Box(f"out:{o.name}", o.name, "output", "io", f"graph output {o.name}", "ellipse")
        if o.name in producer:
            d.edges.append((producer[o.name], f"out:{o.name}", o.name))
    return d


def reads(n: NodeProto) -> list[str]:
    """Every value the node reads: its inputs, then what its subgraphs read from outside."""
    ins = [v for v in n.input if v]
    return ins + [v for v in implicit_inputs(n) if v not in ins]


def node_box(bid: str, n, inits: set[str], state: str) -> Box:
    ins = [v for v in n.input if v]
    outer = [v for v in implicit_inputs(n) if v not in ins]
    title = (f"{op_name(n)} {n.name}\ninputs: {', '.join(ins) or '-'}"
             + (f"\nread by its subgraphs: {', '.join(outer)}" if outer else "")
             + f"\noutputs: {', '.join(o for o in n.output if o)}"
             + (f"\ninitializers: {', '.join(v for v in ins + outer if v in inits)}"
                if any(v in inits for v in ins + outer) else ""))
    return Box(bid, op_name(n), n.name, state, title)


def layout(d: Drawing) -> dict[str, tuple[float, float]]:
    """Box id -> (x, y) of its top-left corner."""
    preds: dict[str, list[str]] = {b: [] for b in d.boxes}
    succs: dict[str, list[str]] = {b: [] for b in d.boxes}
    for a, b, _ in d.edges:
        if a in preds and b in preds and a != b:
            preds[b].append(a)
            succs[a].append(b)
    # Longest-path layers, iteratively (no recursion); edges that close a cycle are ignored.
    layer: dict[str, int] = {}
    state: dict[str, int] = {}
    for root in d.boxes:
        if root in layer:
            continue
        stack = [(root, 0)]
        while stack:
            v, i = stack.pop()
            state[v] = 1
            ps = preds[v]
            if i < len(ps):
                stack.append((v, i + 1))
                p = ps[i]
                if p not in layer and state.get(p) != 1:
                    stack.append((p, 0))
                continue
            layer[v] = 1 + max((layer[p] for p in ps if p in layer), default=-1)
            state[v] = 2
    # Graph outputs go one layer below their producer.
    rows: dict[int, list[str]] = {}
    for v in d.boxes:  # insertion order: graph order
        rows.setdefault(layer[v], []).append(v)
    pos_x: dict[str, float] = {}
    out: dict[str, tuple[float, float]] = {}
    for li in sorted(rows):
        row = rows[li]
        if li > 0:
            def key(v: str, row=row) -> float:
                xs = [pos_x[p] for p in preds[v] if p in pos_x]
                return sum(xs) / len(xs) if xs else float(row.index(v))
            row.sort(key=key)
        for k, v in enumerate(row):
            pos_x[v] = float(k)
            out[v] = (MARGIN + k * (BOX_W + GAP_X), MARGIN + li * (BOX_H + GAP_Y))
    return out


def render_svg(d: Drawing) -> str:
    """The drawing as one <svg> element (well-formed XML)."""
    pos = layout(d)
    width = max((x for x, _ in pos.values()), default=0) + BOX_W + MARGIN
    height = max((y for _, y in pos.values()), default=0) + BOX_H + MARGIN
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="12">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#777"/></marker></defs>',
        '<g class="edges" fill="none" stroke="#999" stroke-width="1.2">',
    ]
    for a, b, value in d.edges:
        if a not in pos or b not in pos or a == b:
            continue
        (x1, y1), (x2, y2) = pos[a], pos[b]
        sx, sy, ex, ey = x1 + BOX_W / 2, y1 + BOX_H, x2 + BOX_W / 2, y2
        if ey <= sy:  # an edge that closes a cycle, or goes up: from the side
            sy, ey = y1 + BOX_H / 2, y2 + BOX_H / 2
        my = (sy + ey) / 2
        parts.append(f'<path d="M {sx:.1f} {sy:.1f} C {sx:.1f} {my:.1f} {ex:.1f} {my:.1f} {ex:.1f} {ey:.1f}" '
                     f'marker-end="url(#arrow)"><title>{escape(value)}</title></path>')
    parts.append("</g>")
    parts.append('<g class="nodes">')
    for bid, box in d.boxes.items():
        x, y = pos[bid]
        fill, stroke = COLORS.get(box.state, COLORS["same"])
        cls = f"node {box.state}"
        parts.append(f'<g class="{cls}" data-id="{escape(bid)}"><title>{escape(box.title)}</title>')
        if box.shape == "ellipse":
            parts.append(f'<ellipse cx="{x + BOX_W / 2:.1f}" cy="{y + BOX_H / 2:.1f}" rx="{BOX_W / 2:.1f}" '
                         f'ry="{BOX_H / 2:.1f}" fill="{fill}" stroke="{stroke}"/>')
        else:
            width = 2.5 if box.state in ("added", "removed", "changed") else 1
            parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" '
                         f'stroke="{stroke}" stroke-width="{width}"/>')
        parts.append(f'<text x="{x + BOX_W / 2:.1f}" y="{y + 16:.1f}" text-anchor="middle" font-weight="bold">'
                     f"{escape(_short(box.label, 24))}</text>")
        if box.sub:
            parts.append(f'<text x="{x + BOX_W / 2:.1f}" y="{y + 31:.1f}" text-anchor="middle" fill="#555" '
                         f'font-size="10">{escape(_short(box.sub, 28))}</text>')
        parts.append("</g>")
    parts.append("</g></svg>")
    return "\n".join(parts)


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else "\u2026" + s[-(n - 1):]


def html_page(title: str, sections: list[str], svg: str) -> str:
    """A self-contained HTML page (well-formed XHTML): the sections (already-escaped HTML
    fragments), a legend, then the SVG."""
    legend = "".join(
        f'<span class="key" style="background:{COLORS[s][0]};border-color:{COLORS[s][1]}">{label}</span>'
        for s, label in (("same", "unchanged"), ("changed", "changed"), ("added", "added"), ("removed", "removed"),
                         ("io", "graph input/output"))
    )
    return (
        "<!DOCTYPE html>\n"
        '<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>'
        f"<title>{escape(title)}</title><style>"
        "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;margin:.5em 0}"
        "td,th{border:1px solid #ccc;padding:2px 8px}td.n{text-align:right}"
        ".key{display:inline-block;border:1px solid;padding:1px 6px;margin-right:6px}"
        ".graph{overflow:auto;border:1px solid #ddd}.plus{color:#2e8b2e}.minus{color:#c0392b}"
        "</style></head><body>"
        f"<h1>{escape(title)}</h1>" + "".join(sections)
        + f'<p>{legend}</p><div class="graph">{svg}</div></body></html>\n'
    )


def html_table(header: list[str], rows: list[tuple]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = []
    for r in rows:
        cells = []
        for i, v in enumerate(r):
            cls = ' class="n"' if i else ""
            text = escape(str(v))
            if isinstance(v, str) and i and v.startswith("+"):
                text = f'<span class="plus">{text}</span>'
            elif isinstance(v, str) and i and v.startswith("-"):
                text = f'<span class="minus">{text}</span>'
            cells.append(f"<td{cls}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"
