"""Tools for rule authors: listing rules, checking them for soundness by testing.

`load_program` loads rule files and reads them as data; `eqsat rules` (eqsat/cli/rules.py) and
`eqsat.api.load_rules` build on it.
"""

from __future__ import annotations

from pathlib import Path


def load_program(files: list[Path], default_rules: bool):
    """The prelude, the default rules if `default_rules`, and `files`: type-checked, read as data.

    Contract: the prelude (rules/lang.egg) loads first, then the other default rule files
    when `default_rules`, then `files` in order (a default file named again loads once), all
    into one fresh egglog e-graph: egglog type-checks each file against the op language and
    everything loaded before it. A missing file, an egglog error (as FILE:LINE:COL: message)
    or a clash with what loaded before raises RuleError, as does a file the reader cannot
    parse. Returns `(program, base)`: the `ruletool.model.Program` read from base + files
    (rules and declarations, in load order), and `base`, the default files that were loaded.
    """
    from egglog import bindings as b

    from eqsat.core.rulefiles import Declared, check_rule_files, default_rule_files, load_rule_file
    from eqsat.errors import RuleError
    from eqsat.ruletool.model import read_files
    from eqsat.ruletool.sexp import SexpError

    check_rule_files(files)
    prelude = default_rule_files()
    base = prelude if default_rules else prelude[:1]
    loaded = {p.resolve() for p in base}
    files = [Path(f) for f in files if Path(f).resolve() not in loaded]  # a default file named again: once
    eg, declared = b.EGraph(), Declared()
    for f in base + files:
        load_rule_file(eg, Path(f), declared)
    try:
        return read_files(base + files), base
    except SexpError as e:
        raise RuleError(str(e)) from None
