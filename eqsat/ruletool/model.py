"""Rule files as data: the rules (name, ruleset, where, the `before -> after` comment,
query and actions) and the declarations the checker needs (constructors, relations,
functions, facts), read with the s-expression reader in `sexp.py`.

Contract: `read_files(paths)` reads files in order (the prelude first) and returns one
`Program`; it does not type-check (egglog does that in `eqsat.core.rulefiles`). A rewrite
`(rewrite L R :when (g...))` becomes the query `(= __root L) g...` and the action
`(union __root R)`, so every rule is a query plus actions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from eqsat.core.rulefiles import display_path
from eqsat.ruletool.sexp import Comment, SList, Str, Sym, read

ROOT = "__root"


@dataclass
class Rule:
    name: str
    ruleset: str
    path: str
    line: int
    col: int
    comment: str
    kind: str  # rewrite | birewrite | rule
    query: list
    actions: list
    form: SList = field(repr=False, default=None)
    # the comment above a group of rules written together (no blank line or comment between
    # them): it describes the group, so it is the group's, and `comment` is empty
    group: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def label(self) -> str:
        return self.name or f"(unnamed rule at {self.where})"


@dataclass
class Program:
    rules: list[Rule] = field(default_factory=list)
    ctors: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # name -> (sort, arg sorts)
    relations: dict[str, list[str]] = field(default_factory=dict)
    functions: dict[str, tuple[list[str], str]] = field(default_factory=dict)  # name -> (args, out)
    facts: list[tuple[str, list]] = field(default_factory=list)  # top-level (rel args...)
    tables: dict[str, list[tuple[list, object]]] = field(default_factory=dict)  # top-level (set (f args) v)
    rulesets: dict[str, str] = field(default_factory=dict)  # ruleset -> declaring file
    files: list[str] = field(default_factory=list)


def _keywords(items: list) -> tuple[list, dict]:
    """Split `a b :k v ...` into positional items and keyword values."""
    pos, kw, i = [], {}, 0
    while i < len(items):
        x = items[i]
        if isinstance(x, Sym) and x.startswith(":"):
            nxt = items[i + 1] if i + 1 < len(items) else None
            if isinstance(nxt, Sym) and nxt.startswith(":"):  # a flag (:subsume): no value
                kw[x[1:]] = True
                i += 1
                continue
            kw[x[1:]] = nxt
            i += 2
        else:
            pos.append(x)
            i += 1
    return pos, kw


def _comment_for(form: SList, comments: dict[int, Comment], code: dict[int, SList], prev: dict) -> str:
    """The comment block directly above a rule; for a rule with none written right under
    another rule (no blank line between), that rule's: the comment of their group."""
    block, k = [], form.line - 1
    while k in comments and k not in code:
        t = comments[k].text
        if t.startswith(("---", "===")):  # a section header: its title, if it has one
            title = t.strip("-= ")
            if title and not block:
                block.insert(0, title)
            break
        block.insert(0, t)
        k -= 1
    if not block:
        above = code.get(form.line - 1)
        return prev.get(id(above), "") if above is not None else ""
    for i, t in enumerate(block):
        if "->" in t:
            return " ".join(x for x in block[i:] if x)
    return " ".join(x for x in block if x)


def read_text(prog: Program, text: str, path: str) -> None:
    forms, comments = read(text, path)
    by_line = {c.line: c for c in comments}
    code: dict[int, SList] = {}
    for f in forms:
        if isinstance(f, SList):
            for ln in range(f.line, f.end_line + 1):
                code[ln] = f
    # a comment that shares its line with code is a trailing comment, not a rule's comment
    comments_alone = {ln: c for ln, c in by_line.items() if ln not in code}
    prev_comment: dict[int, str] = {}
    rule_at: dict[int, Rule] = {}  # id(form) -> its rule
    prog.files.append(path)
    for f in forms:
        if not isinstance(f, SList) or not f or not isinstance(f[0], Sym):
            continue
        head, args = f[0], list(f[1:])
        if head == "datatype":
            for v in args[1:]:
                if isinstance(v, SList) and v:
                    prog.ctors[str(v[0])] = (str(args[0]), [str(s) for s in _keywords(list(v[1:]))[0]])
        elif head == "datatype*":
            for d in args:
                for v in d[1:]:
                    if isinstance(v, SList) and v:
                        prog.ctors[str(v[0])] = (str(d[0]), [str(s) for s in _keywords(list(v[1:]))[0]])
        elif head == "constructor":
            pos, _ = _keywords(args)
            prog.ctors[str(pos[0])] = (str(pos[2]), [str(s) for s in pos[1]])
        elif head == "relation":
            prog.relations[str(args[0])] = [str(s) for s in args[1]]
        elif head == "function":
            pos, _ = _keywords(args)
            prog.functions[str(pos[0])] = ([str(s) for s in pos[1]], str(pos[2]))
        elif head == "ruleset":
            prog.rulesets[str(args[0])] = path
        elif head == "set" and isinstance(args[0], SList):
            prog.tables.setdefault(str(args[0][0]), []).append((list(args[0][1:]), args[1]))
        elif head in prog.relations:
            prog.facts.append((str(head), args))
        elif head in ("rewrite", "birewrite", "rule"):
            pos, kw = _keywords(args)
            name = str(kw.get("name") or "")
            ruleset = str(kw.get("ruleset") or "")
            if head == "rule":
                query, actions = list(pos[0]), list(pos[1])
            else:
                guards = list(kw.get("when") or [])
                query = [_mk_list([Sym("="), _sym(ROOT), pos[0]], f)] + guards
                actions = [_mk_list([Sym("union"), _sym(ROOT), pos[1]], f)]
            comment = _comment_for(f, comments_alone, code, prev_comment)
            prev_comment[id(f)] = comment
            rule = Rule(name, ruleset, path, f.line, f.col, comment, str(head), query, actions, f)
            above = rule_at.get(id(code.get(f.line - 1)))  # a rule right above, no blank line between
            if comment and above is not None and (f.line - 1) not in comments_alone:
                for r in (above, rule):  # a group: its comment is shown once, as the group's heading
                    r.group, r.comment = comment, ""
            rule_at[id(f)] = rule
            prog.rules.append(rule)


def _sym(s: str) -> Sym:
    return Sym(s)


def _mk_list(items: list, at: SList) -> SList:
    lst = SList(items)
    lst.line, lst.col, lst.end_line = at.line, at.col, at.end_line
    return lst


def read_files(paths: list[Path]) -> Program:
    """One Program from the files, in order (display paths as eqsat shows them)."""
    prog = Program()
    for p in paths:
        read_text(prog, Path(p).read_text(encoding="utf-8"), display_path(Path(p)))
    return prog


__all__ = ["ROOT", "Program", "Rule", "read_files", "read_text", "Str", "Sym", "SList"]
