"""`eqsat export-egraph`: a saved e-graph in another tool's format.

    eqsat export-egraph EGRAPH.json --format gym [--cost-model NAME] [--hardware P] [--dim N=V] -o GYM.json

`--format gym` writes egraph-serialize JSON that extraction-gym's unmodified extractors and
its `result.check` accept (extract/gym.py): term nodes only, the named cost model's costs
in `cost`, no subsumed node or forbidden constructor offered, roots eqsat's. Node ids and
e-class names are kept, so a choice made on the export is one on the saved e-graph
(`eqsat extract EGRAPH.json --check`). stdout: one line, what was kept. Exit 2 on bad usage
or a file that is not a saved e-graph, 1 when nothing extractable is left of a root.
"""

from __future__ import annotations

import argparse
import json

from eqsat.cli.args import add_dim, output_file, warn_unknown_dims
from eqsat.errors import OptimizeError, extraction_errors
from eqsat.extract.costs import DEFAULT as COST_MODEL_DEFAULT
from eqsat.io.atomic import write_text
from eqsat.settings import HARDWARE_DEFAULT

FORMATS = ("gym",)


def register(subparsers) -> dict:
    x = subparsers.add_parser(
        "export-egraph", help="write a saved e-graph in extraction-gym's format",
        description="Write an e-graph saved by `eqsat optimize --save-egraph` as egraph-serialize JSON that "
                    "extraction-gym's extractors and checker accept: term nodes only (no analysis tables, "
                    "forbidden constructors or subsumed nodes), priced by a cost model.")
    x.add_argument("egraph", metavar="EGRAPH.json")
    x.add_argument("--format", choices=FORMATS, required=True, help="the format to write: gym (extraction-gym)")
    x.add_argument("--cost-model", metavar="NAME", default=None,
                   help=f"the model whose costs go in each node's cost (default {COST_MODEL_DEFAULT})")
    x.add_argument("--hardware", metavar="PROFILE",
                   help="hardware profile (default: the one the e-graph was saturated with, else cpu)")
    add_dim(x, "; default: those the e-graph records")
    x.add_argument("-o", "--output", metavar="GYM.json", type=output_file, required=True,
                   help="the file to write")
    return {"export-egraph": cmd_export_egraph}


def cmd_export_egraph(args: argparse.Namespace) -> int:
    from eqsat.cli.extract import load_egraph
    from eqsat.core.pipeline import Options, cost_model
    from eqsat.extract.gym import GymExportError, to_gym

    g = load_egraph(args.egraph)
    settings = g.meta.get("settings", {})
    opts = Options(hardware=args.hardware or settings.get("hardware", HARDWARE_DEFAULT),
                   dims={**settings.get("dims", {}), **dict(args.dim)},
                   cost_model=args.cost_model or (COST_MODEL_DEFAULT if g.meta else "file-costs"))
    cost = cost_model(opts)  # a bad name or profile fails here, in one line
    warn_unknown_dims(set(g.meta.get("dims", {}).values()), args.dim, "the e-graph")
    with extraction_errors("export failed", cost):
        costs = cost.costs(g)
    try:
        data = to_gym(g, costs)
    except GymExportError as e:
        raise OptimizeError(f"{args.egraph}: cannot export: {e}") from None
    write_text(args.output, json.dumps(data, indent=1))
    classes = len({n["eclass"] for n in data["nodes"].values()})
    print(f"{args.output}: {len(data['nodes'])} of {len(g.nodes)} term nodes in {classes} e-classes, "
          f"{len(data['root_eclasses'])} root{'' if len(data['root_eclasses']) == 1 else 's'}, costs under "
          f"{cost.name}")
    return 0
