"""`eqsat extract`: extract from a saved e-graph, or check a choice made elsewhere.

    eqsat extract EGRAPH.json [--extractor X]... [--cost-model Y]... [-o CHOICE.json]
    eqsat extract EGRAPH.json --check CHOICE.json [--cost-model Y]...

The e-graph is one `eqsat optimize --save-egraph` wrote, or any egraph-serialize file
without eqsat's metadata (extraction-gym's, Tensat's e-graphs among them): every node is
then a term, the roots are its `root_eclasses`, and the default cost model is
`file-costs`, each node's own `cost` (zero allowed). No model is needed. The hardware
profile and symbolic sizes default to those the e-graph records (its `eqsat.settings`),
so a cost model prices it as `eqsat optimize` did. stdout: one line per cost model and
extractor with the extraction's DAG and tree cost (with --check: per cost model, the
verdict and the choice's costs). Exit 1 when the choice fails the checker
(a root not chosen, not closed, a cycle, a node of another e-class), 2 on bad usage.
A choice file goes back to ONNX with `eqsat optimize MODEL --choice CHOICE.json`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from eqsat.cli.args import add_dim, output_file, positive_float, warn_unknown_dims
from eqsat.errors import UsageError
from eqsat.extract.costs import DEFAULT as COST_MODEL_DEFAULT
from eqsat.io.atomic import write_text
from eqsat.settings import EXTRACTOR_DEFAULT, HARDWARE_DEFAULT


def register(subparsers) -> dict:
    x = subparsers.add_parser(
        "extract", help="extract from a saved e-graph, or check a choice file against it",
        description="Extract a program from an e-graph saved by `eqsat optimize --save-egraph` and report its DAG "
                    "and tree cost (-o writes the choice), or, with --check, check a choice file made elsewhere: "
                    "every root chosen, closed, acyclic. Exit 1 when the choice fails the check. `eqsat optimize "
                    "MODEL --choice CHOICE.json` turns a choice into a model.")
    x.add_argument("egraph", metavar="EGRAPH.json")
    x.add_argument("--extractor", action="append", default=[], metavar="NAME",
                   help="as for optimize (default ilp); repeatable: one line for each")
    x.add_argument("--extract-time-limit", type=positive_float, metavar="S",
                   help="seconds for the ILP extractor (default: its own, 60)")
    x.add_argument("--cost-model", action="append", default=[], metavar="NAME",
                   help="as for optimize (default roofline; with --check, the model the choice file names); "
                        "repeatable: one line for each")
    x.add_argument("--hardware", metavar="PROFILE",
                   help="hardware profile (default: the one the e-graph was saturated with, else cpu)")
    add_dim(x, "; default: those the e-graph records")
    x.add_argument("--check", metavar="CHOICE.json", type=Path,
                   help="check this choice file instead of extracting")
    x.add_argument("-o", "--output", metavar="CHOICE.json", type=output_file, help="write the choice file")
    return {"extract": cmd_extract}


def saved_options(g, hardware: str | None, dims: dict, **fields):
    """Options for pricing a saved e-graph `g`: its own profile and symbolic sizes unless
    `hardware` / `dims` (which win over the saved sizes) say otherwise."""
    from eqsat.settings import Options

    saved = g.meta.get("settings", {})
    return Options(hardware=hardware or saved.get("hardware", HARDWARE_DEFAULT),
                   dims={**saved.get("dims", {}), **dims}, **fields)


def load_egraph(path: str | Path):
    """The e-graph file at `path`, checked (extract.schema): UsageError (exit 2) for a file
    that is missing, unreadable, not JSON, or has a field eqsat reads that does not hold
    what it must (`FILE: nodes["12"].cost: expected a number >= 0, got "x"`)."""
    from eqsat.extract import EGraph
    from eqsat.extract.schema import EGraphFormatError

    path = Path(path)
    try:
        g = EGraph.from_json(path)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not an e-graph file (binary, not JSON); `eqsat optimize --save-egraph` "
                         "writes one") from None
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: not an e-graph file ({e})") from None
    except EGraphFormatError as e:
        if not e.field or (e.field == "nodes" and e.missing):  # not egraph-serialize JSON at all
            what = "no \"nodes\" object" if e.field else "not egraph-serialize JSON"
            raise UsageError(f"{path}: not an e-graph file ({what}); `eqsat optimize --save-egraph` "
                             "writes one") from None
        raise UsageError(f"{path}: {e}") from None
    except ValueError as e:  # a newer format
        raise UsageError(f"{path}: {e}") from None
    if not g.meta and any(n.op == "Value" and g.class_type(n.eclass) == "Op" for n in g.nodes.values()):
        # egglog's serialization of eqsat's e-graph, its "eqsat" object cut off: without the
        # constructor list every table row (shape, dtype, a Value handle) would be read as a term
        raise UsageError(f"{path}: an eqsat e-graph without eqsat's metadata (the top-level \"eqsat\" object: "
                         "constructors, roots, value classes): its analysis tables would be read as terms; "
                         "`eqsat optimize --save-egraph` writes the whole file")
    if not g.roots:
        raise UsageError(f"{path}: the e-graph names no roots (the model it was saved from has no outputs); "
                         "`eqsat optimize --save-egraph` writes them")
    return g


def default_cost_model(g) -> str:
    """roofline for eqsat's own e-graphs; a file without eqsat's metadata (extraction-gym's)
    is priced by its own costs."""
    from eqsat.extract.costs import FileCosts

    return COST_MODEL_DEFAULT if g.meta else FileCosts.name


def cmd_extract(args: argparse.Namespace) -> int:
    from eqsat.core.pipeline import cost_model, read_choice
    from eqsat.environment import check_environment

    check_environment()
    if args.check and args.output:
        raise UsageError("--check reads a choice and -o writes one: give one of them")
    if args.check and (args.extractor or args.extract_time_limit is not None):
        raise UsageError("--check checks a choice made already: --extractor and --extract-time-limit do not apply")
    extractors = list(dict.fromkeys(args.extractor or [EXTRACTOR_DEFAULT]))
    names = list(dict.fromkeys(args.cost_model))
    if args.output and len(extractors) * max(1, len(names)) > 1:
        raise UsageError("-o writes one choice: give one --extractor and one --cost-model with it")
    picked = read_choice(args.check) if args.check else None
    g = load_egraph(args.egraph)
    # --check prices at the sizes the choice's costs were computed at, unless told others
    made_at = picked[1].get("dims", {}) if picked else {}  # checked: NAME -> size (choice_file.read)
    opts = saved_options(g, args.hardware, {**made_at, **dict(args.dim)})
    if not names:  # --check prices the choice under the model that made it, where this eqsat has it
        names = [_model_of(picked[1], args.check) if picked else default_cost_model(g)]
    models = [cost_model(dataclasses.replace(opts, cost_model=name)) for name in names]  # bad names fail now
    _warn_settings(args, g)
    if picked:
        return _check(args, g, models, picked)
    return _extract(args, g, models, extractors, opts.dims)


def _model_of(meta: dict, path) -> str:
    """The cost model a choice file names, if registered or installed here, else the default."""
    from eqsat.extract import plugins
    from eqsat.extract.costs import COST_MODELS

    name = meta.get("cost_model") or COST_MODEL_DEFAULT
    if name in COST_MODELS or name in plugins.names(plugins.COST_MODEL_GROUP):
        return name
    print(f"eqsat: warning: {path} was made under cost model {name!r}, which this eqsat cannot build; "
          f"pricing it under {COST_MODEL_DEFAULT} (--cost-model to choose)", file=sys.stderr)
    return COST_MODEL_DEFAULT


def _warn_settings(args: argparse.Namespace, g) -> None:
    """Options that disagree with what made the e-graph: warnings, as optimize gives them."""
    from eqsat.backends.ort.target import hardware_profile, profile_id

    saved = g.meta.get("settings", {}).get("hardware")
    if args.hardware and saved and profile_id(hardware_profile(args.hardware)) != profile_id(saved):
        print(f"eqsat: warning: --hardware {args.hardware}: the e-graph was saturated with profile {saved}, whose "
              "facts (which fusions and layouts pay) it holds; its costs under another profile mix the two",
              file=sys.stderr)
    warn_unknown_dims(set(g.meta.get("dims", {}).values()), args.dim, "the e-graph")


def _check(args: argparse.Namespace, g, models: list, picked: tuple[dict, dict]) -> int:
    """One line per cost model for a valid choice; exit 1 with the checker's reason if not."""
    from eqsat.core.pipeline import UnpricedChoice, file_choice

    for cost in models:
        try:
            ex = file_choice(g, picked, args.check, cost, str(args.egraph))
            priced = _costs(ex.dag_cost, ex.tree_cost, cost)
        except UnpricedChoice as e:  # valid all the same: exit 1 is for a choice that fails the check
            priced = f"not priced ({e.reason})"
        print(f"{args.check}: valid for {args.egraph} (every root chosen, closed, acyclic); {cost.name}: {priced}")
    return 0


def _extract(args: argparse.Namespace, g, models: list, extractors: list[str], dims: dict[str, int]) -> int:
    """One line per cost model and extractor, each extraction checked; -o writes the one."""
    from eqsat.core.pipeline import extractor_type, run_extractor
    from eqsat.extract.choice_file import as_json

    classes = {name: extractor_type(name) for name in extractors}
    for cost in models:
        for name, cls in classes.items():
            ex = run_extractor(g, name, cost, args.extract_time_limit)  # None: the extractor's own default
            notes = f" ({'; '.join(ex.notes)})" if ex.notes else ""
            n = len(ex.choice)
            print(f"{args.egraph}: {ex.extractor}{' (optimal)' if cls.optimal and not ex.notes else ''} under "
                  f"{cost.name}: {n} e-class{'' if n == 1 else 'es'} chosen, "
                  f"{_costs(ex.dag_cost, ex.tree_cost, cost)}, {ex.time_s:.2f} s{_proof(ex)}{notes}")
            if args.output:
                write_text(args.output, json.dumps(as_json(ex, g, cost.name, dims), indent=1))
    return 0


def _proof(ex) -> str:
    """An exact extractor's status and proven lower bound (extract.base.Extraction), or nothing."""
    if ex.status is None:
        return ""
    bound = f", lower bound {ex.lower_bound:.6g}, gap {ex.gap:.2%}" if ex.lower_bound is not None else ", no bound"
    return f", {ex.status}{bound}"


def _costs(dag: float, tree: float, cost) -> str:
    unit = f" {cost.unit}" if cost.unit else ""
    return f"DAG cost {dag:.6g}{unit}, tree cost {tree:.6g}{unit}"
