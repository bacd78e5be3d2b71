"""`eqsat rules list|check`: tools for rule authors.

`rules list` prints every rule: name, ruleset, FILE:LINE and its `before -> after`
comment. `rules check FILE.egg...` type-checks the files against the op language (errors
as FILE:LINE:COL: message) and tests each rule for soundness (see `check.py`). Exit codes:
0 all checked rules sound (unchecked ones too unless --strict), 1 a rule changes results
(or, with --strict, one is unchecked), 2 a file does not load. Both take rule files as
arguments or with `--rules FILE` (optimize's spelling), and report an argument they do not
know with their own usage.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from eqsat.cli.args import output_file
from eqsat.errors import UsageError
from eqsat.io.atomic import write_text
from eqsat.ruletool import load_program


def register(subparsers) -> dict:
    p = subparsers.add_parser("rules", help="list and check rule files",
                              description="Tools for rule authors: list rules, check them for soundness.")
    sub = p.add_subparsers(dest="rules_command", metavar="SUBCOMMAND", parser_class=_own_usage(type(p)))
    lp = sub.add_parser("list", help="every rule: name, ruleset, FILE:LINE, its comment",
                        description="List every rule with its name, ruleset, FILE:LINE and its "
                                    "`before -> after` comment.")
    # both subcommands take rule files both ways: as arguments, and with --rules (optimize's spelling)
    lp.add_argument("files", nargs="*", metavar="FILE.egg", help="also these rule files (as --rules)")
    lp.add_argument("--rules", action="append", default=[], metavar="FILE.egg", help="also these rule files")
    lp.add_argument("--no-default-rules", action="store_true", help="leave out the default rules")
    lp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    cp = sub.add_parser("check", help="type-check rule files and test each rule for soundness",
                        description="Type-check rule files against the op language, then test each "
                                    "rule: both sides on random inputs that satisfy its guards, run "
                                    "under onnxruntime, must agree.")
    cp.add_argument("files", nargs="*", metavar="FILE.egg", help="rule files to check")
    cp.add_argument("--rules", action="append", default=[], metavar="FILE.egg",
                    help="rule files to check (as the arguments)")
    cp.add_argument("--default", action="store_true", help="check the default rules too")
    cp.add_argument("--rule", action="append", default=[], metavar="NAME", help="only rules with this name")
    cp.add_argument("--strict", action="store_true", help="exit 1 when a rule cannot be checked")
    cp.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    cp.add_argument("--json", metavar="FILE", type=output_file, help="write the results as JSON")
    cp.add_argument("-v", "--verbose", action="store_true", help="one line per checked rule too")
    return {"rules": handle}


def _own_usage(parser_class):
    """The subcommands' parser class: one that reports an argument it does not know itself,
    with its own usage (`usage: eqsat rules list ...`), not the `rules` parser's."""
    class Subcommand(parser_class):
        def parse_known_args(self, args=None, namespace=None):
            ns, extra = super().parse_known_args(args, namespace)
            if extra:
                self.error(f"unrecognized arguments: {' '.join(extra)}")
            return ns, extra

    return Subcommand


def _files(args) -> list[Path]:
    """The rule files a subcommand names, as arguments and with --rules, each once."""
    return [Path(f) for f in dict.fromkeys(str(f) for f in [*args.files, *args.rules])]


def handle(args) -> int:
    if args.rules_command == "list":
        return _list(args)
    if args.rules_command == "check":
        return _check(args)
    raise UsageError("rules needs a subcommand: list or check (eqsat rules --help)")


def _list(args) -> int:
    prog, _ = load_program(_files(args), not args.no_default_rules)
    rules = prog.rules
    if args.json:
        print(json.dumps([{"name": r.name, "ruleset": r.ruleset, "file": r.path, "line": r.line,
                           "comment": r.comment, "group": r.group} for r in rules], indent=1))
        return 0
    # A comment above rules written together is their group's: shown once, as a heading
    # (`; COMMENT`), with the group's rules indented under it.
    label = {id(r): f"  {r.label}" if r.group else r.label for r in rules}
    wn = max((len(x) for x in label.values()), default=4)
    ws = max((len(r.ruleset) for r in rules), default=7)
    wf = max((len(r.where) for r in rules), default=4)
    prev = None
    for r in rules:
        if r.group and (prev is None or (prev.path, prev.group) != (r.path, r.group)):
            print(f"; {r.group}")
        comment = "" if r.group else r.comment or "(no before -> after comment)"
        print(f"{label[id(r)]:<{wn}}  {r.ruleset:<{ws}}  {r.where:<{wf}}  {comment}".rstrip())
        prev = r
    print(f"{len(rules)} rule{'' if len(rules) == 1 else 's'}", file=sys.stderr)
    return 0


def _check(args) -> int:
    from eqsat.core.rulefiles import display_path
    from eqsat.ruletool.check import check_rules

    files = _files(args)
    if not files and not args.default:
        raise UsageError("rules check needs rule files (or --default for the default rules)")
    t0 = time.perf_counter()
    prog, base = load_program(files, True)
    wanted = {display_path(f) for f in files}
    if args.default:
        wanted |= {display_path(f) for f in base}
    rules = [r for r in prog.rules if r.path in wanted and (not args.rule or r.name in args.rule)]
    if args.rule and not rules:
        raise UsageError(f"no rule named {', '.join(args.rule)} in these files")
    print(f"{', '.join(sorted(wanted))}: loaded and type-checked; "
          f"testing {len(rules)} rule{'' if len(rules) == 1 else 's'}", file=sys.stderr)
    results = check_rules(rules, prog, seed=args.seed)
    counts: dict[str, int] = {}
    for res in results:
        counts[res.status] = counts.get(res.status, 0) + 1
        r = res.rule
        head = f"{r.where}: {r.label}"
        if res.status == "unsound":
            print(f"{head}: UNSOUND: {res.detail}")
        elif res.status == "unchecked":
            print(f"{head}: unchecked: {res.detail}")
        elif res.status == "facts":
            if res.covered_by:
                if args.verbose:
                    print(f"{head}: derives facts; checked through {', '.join(res.covered_by[:3])}")
            else:
                counts["facts-uncovered"] = counts.get("facts-uncovered", 0) + 1
                print(f"{head}: unchecked: derives facts that no checked rule used")
        elif args.verbose:
            print(f"{head}: ok ({res.runs} runs{'; ' + res.detail if res.detail else ''})")
    n_facts = counts.get("facts", 0)
    summary = (f"{counts.get('ok', 0)} checked, {counts.get('unsound', 0)} unsound, "
               f"{counts.get('unchecked', 0)} unchecked, {n_facts} derive facts only "
               f"({n_facts - counts.get('facts-uncovered', 0)} of them covered by checked rules); "
               f"{time.perf_counter() - t0:.1f} s")
    print(summary, file=sys.stderr)
    if args.json:
        write_text(args.json, json.dumps([
            {"name": x.rule.name, "ruleset": x.rule.ruleset, "file": x.rule.path, "line": x.rule.line,
             "status": x.status, "detail": x.detail, "runs": x.runs, "covered_by": x.covered_by,
             **({"counterexample": x.counterexample} if x.counterexample else {})}
            for x in results], indent=1))
    if counts.get("unsound"):
        return 1
    if args.strict and (counts.get("unchecked") or counts.get("facts-uncovered")):
        print(f"--strict: {counts.get('unchecked', 0)} unchecked rule(s) and {counts.get('facts-uncovered', 0)} "
              "fact rule(s) no checked rule used: exit 1", file=sys.stderr)
        return 1
    return 0
