"""Op histograms of models and the tables `eqsat show` and `eqsat diff` print."""

from __future__ import annotations

from collections import Counter

from onnx import ModelProto, NodeProto


def op_name(node: NodeProto) -> str:
    """The op type, prefixed by its domain outside the default one (com.microsoft.FusedConv)."""
    return (f"{node.domain}." if node.domain not in ("", "ai.onnx") else "") + node.op_type


def histogram(model: ModelProto) -> Counter:
    """Op name -> number of nodes of the main graph (subgraphs are not counted)."""
    return Counter(op_name(n) for n in model.graph.node)


def subgraph_histogram(model: ModelProto) -> tuple[Counter, int]:
    """Op name -> number of nodes inside the main graph's subgraphs (If, Loop and Scan
    bodies, nested ones included), and how many bodies there are."""
    from eqsat.core.scopes import subgraphs

    h: Counter = Counter()
    bodies = 0
    stack = [g for n in model.graph.node for a in n.attribute for g in subgraphs(a)]
    while stack:
        g = stack.pop()
        bodies += 1
        for n in g.node:
            h[op_name(n)] += 1
            stack.extend(sub for a in n.attribute for sub in subgraphs(a))
    return h, bodies


def histogram_rows(h: Counter) -> list[tuple[str, int]]:
    """(op, count), most frequent first, then by name."""
    return sorted(h.items(), key=lambda kv: (-kv[1], kv[0]))


def diff_rows(before: Counter, after: Counter) -> list[tuple[str, int, int, int]]:
    """(op, count before, count after, delta) for every op in either model: largest change
    first, then by name."""
    ops = set(before) | set(after)
    rows = [(op, before.get(op, 0), after.get(op, 0), after.get(op, 0) - before.get(op, 0)) for op in ops]
    return sorted(rows, key=lambda r: (-abs(r[3]), r[0]))


def format_table(header: list[str], rows: list[tuple], total: tuple | None = None) -> str:
    """A plain text table: the first column left-aligned, the others right-aligned."""
    cells = [list(header)] + [[_cell(v) for v in r] for r in rows] + ([[_cell(v) for v in total]] if total else [])
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(r[0].ljust(widths[0]) if i == 0 else r[i].rjust(widths[i]) for i in range(len(r))).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1 : len(rows) + 1]]
    if total:
        out += ["  ".join("-" * w for w in widths), line(cells[-1])]
    return "\n".join(out)


def _cell(v) -> str:
    return str(v)


def show_table(model: ModelProto) -> str:
    return histogram_table(histogram(model))


def histogram_table(h: Counter) -> str:
    """(op, count) rows, most frequent first, and their total."""
    rows = histogram_rows(h)
    return format_table(["op", "count"], rows, ("total", sum(c for _, c in rows)))


def diff_table(before: ModelProto, after: ModelProto) -> str:
    b, a = histogram(before), histogram(after)
    rows = [(op, nb, na, _signed(d)) for op, nb, na, d in diff_rows(b, a)]
    tb, ta = sum(b.values()), sum(a.values())
    return format_table(["op", "before", "after", "delta"], rows, ("total", tb, ta, _signed(ta - tb)))


def _signed(d: int) -> str:
    return f"+{d}" if d > 0 else str(d)
