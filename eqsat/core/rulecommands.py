"""What a rule file may hold: an allow-list of egglog commands, checked before any runs.

Contract: `refuse_commands(cmds, path, text)` raises RuleError with one line
`FILE:LINE:COL: (CMD ...) is not allowed in a rule file: REASON` for the first command of
a parsed rule file that is not one of

- a declaration: `sort` (of the containers Vec, Set, Map, MultiSet, as are the sorts a
  `datatype*` declares), `datatype`, `datatype*`, `constructor`, `function`, `relation`,
  `ruleset`;
- a rule: `rule`, `rewrite`, `birewrite`;
- a fact at the top level: a relation or function call, `set`, `union`;

and for any use, in any command, of the Python object sort (`PyObject`), of a
primitive that runs Python code or calls a function by its name (`py-eval`, `py-exec`,
`py-call`, ..., `unstable-fn`, `unstable-app`), or of one that makes a number without a
size limit (`bigint`, `bigrat`, `from-string`). Every other command kind, including
kinds that a later egglog adds, is refused: reading or writing files (`input`, `output`),
`include`, running or scheduling rules, `push`/`pop`, `check`, `extract`, the `print-*`
commands, `fail`, `prove`, a top-level `let`, `delete`, `subsume` or `panic`.
"""

from __future__ import annotations

import re

from egglog import bindings as b

from eqsat.errors import RuleError

# Command classes by name: a name a version of egglog lacks is simply not allowed there.
_ALLOWED = {"Sort", "Datatype", "Datatypes", "Constructor", "FunctionCommand", "Relation",
            "AddRuleset", "RuleCommand", "RewriteCommand", "BiRewriteCommand"}
_FACTS = {"Expr_", "Set", "Union"}  # the actions an ActionCommand may hold
_CONTAINERS = {"Vec", "Set", "Map", "MultiSet"}  # the sorts a `sort` may build on
_PY_SORTS = {"PyObject"}
_CALL_PREFIXES = ("py-", "unstable-")  # Python code; a function called through its name
# the only ways to make a number without a size limit (BigInt, BigRat): one primitive on
# them, (<< (bigint 1) 10000000000), takes memory without bound, and no limit interrupts it
_UNBOUNDED = {"bigint", "bigrat", "from-string"}
_BINDINGS = tuple(v for v in vars(b).values() if isinstance(v, type))
_SPANS = tuple(getattr(b, n) for n in ("EgglogSpan", "PanicSpan", "RustSpan", "SrcFile") if hasattr(b, n))
_SPAN_RE = re.compile(r"In (\d+):(\d+)-")
_HEAD_RE = re.compile(r"\(\s*([^\s()]+)")

_DECLARES = ("a rule file only declares sorts, constructors, functions, relations, rulesets, "
             "rules and facts")
_REASONS = {
    "output": "it writes a file",
    "input": "it reads a file",
    "run": "eqsat runs the rulesets itself, under its schedule and limits",
    "run-schedule": "eqsat runs the rulesets itself, under its schedule and limits",
    "push": "eqsat owns the e-graph's push/pop stack",
    "pop": "eqsat owns the e-graph's push/pop stack",
    "let": "it makes a global term, which would join every model's e-graph",
}


def refuse_commands(cmds: list, path: str, text: str) -> None:
    """Raise RuleError for the first command a rule file may not hold (module docstring)."""
    for i, c in enumerate(cmds):
        kind = type(c).__name__
        if kind == "Include":
            raise RuleError(f'{_place(cmds, i, path, text)[0]}: (include "{c.path}") is not allowed '
                            f"in a rule file: pass {c.path} with another --rules")
        allowed = kind in _ALLOWED or (kind == "ActionCommand" and type(c.action).__name__ in _FACTS)
        if not allowed:
            where, head = _place(cmds, i, path, text)
            reason = _REASONS.get(head, "")
            raise RuleError(f"{where}: ({head} ...) is not allowed in a rule file: "
                            + (f"{reason}; {_DECLARES}" if reason else _DECLARES))
        for base in _sort_bases(c):
            if base not in _CONTAINERS:
                where, head = _place(cmds, i, path, text)
                raise RuleError(f"{where}: ({head} ...) is not allowed in a rule file: it builds a sort on "
                                f"{base}; a sort may only build on {', '.join(sorted(_CONTAINERS))}")
    # Every name egglog reads is a piece of the text: without these pieces there is none of
    # them (walking the parsed commands costs ~0.5 s for the default rules).
    if any(p in text for p in (*_PY_SORTS, *_CALL_PREFIXES, *_UNBOUNDED)):
        for i, c in enumerate(cmds):
            _refuse_python(c, lambda i=i: _place(cmds, i, path, text), path)


def _sort_bases(c) -> list[str]:
    """The sorts that a `sort` command, or the sorts of a `datatype*`, build on."""
    kind = type(c).__name__
    if kind == "Sort":
        return [c.presort_and_args[0]] if c.presort_and_args else []
    if kind == "Datatypes":
        return [sub.name for _span, _name, sub in c.datatypes if type(sub).__name__ == "NewSort"]
    return []


def _place(cmds: list, i: int, path: str, text: str) -> tuple[str, str]:
    """`FILE:LINE:COL` and the name of the top-level form that command i comes from, as the
    file writes them: the i-th form when there is one form per command, else the form that
    holds egglog's span of the command (a form such as `set-cost` makes several)."""
    from eqsat.ruletool.sexp import SexpError, SList, read

    try:
        forms = [f for f in read(text, path)[0] if isinstance(f, SList) and f]
    except SexpError:
        forms = []
    form = forms[i] if len(forms) == len(cmds) else None
    m = _SPAN_RE.match(str(_span(cmds[i])))
    if form is None and m:
        at = (int(m.group(1)), int(m.group(2)))
        form = next((f for f in reversed(forms) if (f.line, f.col) <= at), None)
    if form is not None:
        return f"{path}:{form.line}:{form.col}", str(form[0])
    return (f"{path}:{m.group(1)}:{m.group(2)}" if m else path), _head(cmds[i])


def _refuse_python(cmd, place, path: str) -> None:
    """A call of a primitive that runs Python code, or a mention of the Python object sort."""
    stack = [cmd]
    while stack:
        o = stack.pop()
        if isinstance(o, (list, tuple)):
            stack.extend(reversed(o))
            continue
        if isinstance(o, str):
            if o in _PY_SORTS:
                where, head = place()
                raise RuleError(f"{where}: ({head} ...) is not allowed in a rule file: it uses the "
                                f"sort {o}, whose primitives run Python code")
            continue
        if not isinstance(o, _BINDINGS) or isinstance(o, _SPANS) or isinstance(o, b.Lit):
            continue
        if isinstance(o, b.Call) and o.name.startswith(_CALL_PREFIXES):
            why = "it runs Python code" if o.name.startswith("py-") else "it calls a function by its name"
            raise RuleError(f"{_where(o, path)}: ({o.name} ...) is not allowed in a rule file: {why}")
        if isinstance(o, b.Call) and o.name in _UNBOUNDED:
            raise RuleError(f"{_where(o, path)}: ({o.name} ...) is not allowed in a rule file: it makes a number "
                            "without a size limit, whose arithmetic no limit of eqsat's can interrupt")
        if isinstance(o, b.Panic):
            continue  # its message is text, not a name
        fields = [getattr(o, n) for n in dir(o) if not n.startswith("_") and n != "span"]
        stack.extend(reversed([v for v in fields if not callable(v) or isinstance(v, _BINDINGS)]))


def _span(o):
    """The first egglog source span in `o` (a command's own, or its first part's)."""
    stack = [o]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(reversed(x))
        elif isinstance(x, _SPANS):
            if _SPAN_RE.match(str(x)):
                return x
        elif isinstance(x, _BINDINGS):
            names = [n for n in dir(x) if not n.startswith("_")]
            names.sort(key=lambda n: n != "span")  # the object's own span first
            stack.extend(reversed([getattr(x, n) for n in names]))
    return None


def _where(o, path: str) -> str:
    m = _SPAN_RE.match(str(_span(o)))
    return f"{path}:{m.group(1)}:{m.group(2)}" if m else path


def _head(c) -> str:
    """The command's name as egglog prints it."""
    h = _HEAD_RE.match(str(c))
    return h.group(1) if h else type(c).__name__
