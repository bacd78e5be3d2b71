"""`eqsat show` and `eqsat diff`.

`eqsat show MODEL.onnx [--html OUT.html | --svg OUT.svg]` prints the model's op histogram
(op, count) and optionally writes its graph drawn as SVG, alone or in an HTML page.
`eqsat diff BEFORE.onnx AFTER.onnx [--html OUT.html] [--context N | --full]` prints, per
op, the count before, after and the change, then how many nodes were kept, removed and
added (eqsat.viz.diffing), and optionally writes an HTML page drawing what changed.
Exit codes as everywhere in eqsat: 0 success, 2 unreadable input or bad usage.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eqsat.cli.args import nonnegative_int, output_file
from eqsat.errors import UsageError


def register(subparsers) -> dict:
    s = subparsers.add_parser("show", help="print a model's op histogram; draw its graph",
                              description="Print a model's op histogram (op, count); with --html or --svg, "
                                          "also draw its graph (a self-contained file, no network).")
    s.add_argument("model", metavar="MODEL.onnx")
    out = s.add_mutually_exclusive_group()
    out.add_argument("--html", metavar="OUT.html", type=output_file, help="write an HTML page: histogram and graph")
    out.add_argument("--svg", metavar="OUT.svg", type=output_file, help="write the graph as an SVG image")

    d = subparsers.add_parser("diff", help="compare two models: op counts and a drawing of what changed",
                              description="Print op counts before, after and the change, and how many nodes were "
                                          "unchanged (same op, inputs, outputs and attributes), changed (same op "
                                          "and outputs), removed and added, and how many initializers changed; "
                                          "with --html, draw what changed.")
    d.add_argument("before", metavar="BEFORE.onnx")
    d.add_argument("after", metavar="AFTER.onnx")
    d.add_argument("--html", metavar="OUT.html", type=output_file, help="write an HTML page: tables and the drawing")
    ctx = d.add_mutually_exclusive_group()
    ctx.add_argument("--context", type=nonnegative_int, default=1, metavar="N",
                     help="draw changed nodes and the nodes within N edges of them (default 1)")
    ctx.add_argument("--full", action="store_true", help="draw every node of both models")
    return {"show": cmd_show, "diff": cmd_diff}


def _load(path: str):
    from eqsat.io.modelio import load_model

    return load_model(Path(path))


def _write(path: Path, text: str) -> None:
    """Atomically (eqsat.io.atomic.write_text): an interrupt leaves no partial drawing."""
    from eqsat.io.atomic import write_text

    try:
        write_text(path, text)
    except OSError as e:
        raise UsageError(f"{path}: cannot write: {e.strerror or e}") from None


def cmd_show(args: argparse.Namespace) -> int:
    from eqsat.viz.graph import html_page, html_table, model_drawing, render_svg
    from eqsat.viz.histogram import (
        histogram,
        histogram_rows,
        histogram_table,
        show_table,
        subgraph_histogram,
    )

    model = _load(args.model)
    g = model.graph
    print(f"{args.model}: {len(g.node)} nodes, {len(g.input)} inputs, {len(g.output)} outputs, "
          f"{len(g.initializer)} initializers")
    print(show_table(model))
    inner, bodies = subgraph_histogram(model)
    if bodies:
        print(f"\ninside {bodies} subgraph{'' if bodies == 1 else 's'} (If, Loop, Scan bodies): "
              f"{sum(inner.values())} nodes")
        print(histogram_table(inner))
    if args.svg or args.html:
        svg = render_svg(model_drawing(model))
        if args.svg:
            _write(args.svg, '<?xml version="1.0" encoding="UTF-8"?>\n' + svg + "\n")
            print(f"wrote {args.svg}")
        else:
            rows = histogram_rows(histogram(model))
            page = html_page(f"{Path(args.model).name}", [
                f"<p>{len(g.node)} nodes, {len(g.input)} inputs, {len(g.output)} outputs, "
                f"{len(g.initializer)} initializers</p>",
                html_table(["op", "count"], rows),
            ], svg)
            _write(args.html, page)
            print(f"wrote {args.html}")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from html import escape

    from eqsat.viz.diffing import diff_drawing, initializer_diff, match_nodes
    from eqsat.viz.graph import html_page, html_table, render_svg
    from eqsat.viz.histogram import diff_rows, diff_table, histogram, op_name

    before, after = _load(args.before), _load(args.after)
    print(f"{args.before} -> {args.after}")
    print(diff_table(before, after))
    nd = match_nodes(before, after)
    idiff = initializer_diff(before, after)
    counts = (f"nodes: {len(nd.same)} unchanged, {len(nd.changed)} changed (other inputs or attributes), "
              f"{len(nd.removed)} removed, {len(nd.added)} added")
    inits = (f"initializers: {idiff.same} unchanged, {len(idiff.changed)} changed (other values), "
             f"{len(idiff.removed)} removed, {len(idiff.added)} added")
    print(counts)
    print(inits)
    if args.html:
        svg = render_svg(diff_drawing(before, after, nd, None if args.full else args.context))
        rows = [(op, b, a, f"+{d}" if d > 0 else str(d)) for op, b, a, d in
                diff_rows(histogram(before), histogram(after))]

        def listing(model, idx: list[int]) -> list[tuple]:
            return [(op_name(model.graph.node[k]), model.graph.node[k].name or "-") for k in idx]

        sections = [
            f"<p>{escape(counts)}; a node is unchanged with the same op, inputs, outputs and attributes, "
            "changed with the same op and outputs</p>",
            f"<p>{escape(inits)}</p>",
            html_table(["op", "before", "after", "delta"], rows),
            "<details><summary>removed nodes</summary>"
            + html_table(["op", "name"], listing(before, nd.removed)) + "</details>",
            "<details><summary>added nodes</summary>"
            + html_table(["op", "name"], listing(after, nd.added)) + "</details>",
            "<details><summary>changed nodes</summary>"
            + html_table(["op", "name"], listing(after, [a for _, a in nd.changed])) + "</details>",
            "<details><summary>changed initializers</summary>"
            + html_table(["name"], [(n,) for n in idiff.changed]) + "</details>",
        ]
        _write(args.html, html_page(f"{Path(args.before).name} \u2192 {Path(args.after).name}", sections, svg))
        print(f"wrote {args.html}")
    return 0
