"""Rule files: where the default ones are, loading them into egglog, and turning egglog's
errors into `FILE:LINE:COL: message` with a hint."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from egglog import bindings as b

from eqsat.core.rulecommands import refuse_commands
from eqsat.errors import INTERRUPTS, RuleError
from eqsat.io.quiet import native_stderr

PRELUDE = "lang.egg"
SCHEDULE = "schedule.egg"


def rules_dir() -> Path:
    """The default rules: shipped as the package `eqsat.rules`, or `rules/` in a checkout."""
    try:
        import eqsat.rules as pkg  # installed wheel (package data)

        for p in getattr(pkg, "__path__", []):
            if (Path(p) / PRELUDE).is_file():
                return Path(p)
    except ImportError:
        pass
    p = Path(__file__).resolve().parents[2] / "rules"
    if (p / PRELUDE).is_file():
        return p
    raise RuleError(f"the default rules ({PRELUDE}) are not installed next to eqsat")


def default_rule_files() -> list[Path]:
    """The default rule files in load order: the prelude, then the others by name."""
    d = rules_dir()
    return [d / PRELUDE] + sorted(p for p in d.glob("*.egg") if p.name not in (PRELUDE, SCHEDULE))


def display_path(p: Path) -> str:
    """A path as the user should read it: relative to the cwd, or rules/NAME for defaults."""
    p = Path(p)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        pass
    if p.resolve().parent == rules_dir().resolve():
        return f"rules/{p.name}"
    return str(p)


@dataclass
class Declared:
    """What the loaded files declare, read from egglog's parsed commands."""

    rulesets: list[str] = field(default_factory=list)  # in declaration order
    constructors: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # name -> (sort, args)
    functions: list[str] = field(default_factory=list)  # functions and relations (not terms)
    rules: dict[str, str] = field(default_factory=dict)  # rule name -> ruleset
    ruleset_files: dict[str, str] = field(default_factory=dict)  # ruleset -> declaring file
    # files with rules written without :ruleset (egglog's default ruleset, named "")
    default_ruleset_files: list[str] = field(default_factory=list)
    rule_files_of: dict[str, list[str]] = field(default_factory=dict)  # ruleset -> files adding rules to it
    rule_places: dict[str, str] = field(default_factory=dict)  # rule name -> FILE:LINE:COL
    rewrites: set[str] = field(default_factory=set)  # named rules that add an equal form (a union)

    def is_rewrite(self, rule: str) -> bool:
        """Whether a rule, by its name in egglog's report, changes the program: it adds an
        equal form of a term (a rewrite, or a rule with a `union` action), which extraction
        may choose. Every other rule only derives facts (shapes, dtypes, the relations that
        recognize patterns): analysis. An unnamed rule is reported by its text."""
        if rule in self.rules:
            return rule in self.rewrites
        return rule.lstrip().startswith(("(rewrite", "(birewrite")) or "(union" in rule

    def _constructor(self, c, sort: str, args: list[str]) -> None:
        """A term constructor; an `:unextractable` one (a handle such as `Value`) is listed
        with the functions: no extraction or size count treats it as a term."""
        if getattr(c, "unextractable", False):
            self.functions.append(c.name)
        else:
            self.constructors[c.name] = (sort, args)

    def absorb(self, cmds: list, path: str, text: str = "", rules: dict | None = None) -> None:
        """Record what `cmds` (one file's parsed commands) declare; `rules` is their
        `rule_heads`, where the caller has it."""
        rules = rule_heads(cmds, path, text) if rules is None else rules
        for i, c in enumerate(cmds):
            if isinstance(c, b.AddRuleset):
                self.rulesets.append(c.name)
                self.ruleset_files[c.name] = path
            elif isinstance(c, b.Datatype):
                for v in c.variants:
                    self._constructor(v, c.name, list(v.types))
            elif isinstance(c, b.Datatypes):
                for _span, sort, sub in c.datatypes:
                    for v in getattr(sub, "variants", []):
                        self._constructor(v, sort, list(v.types))
            elif isinstance(c, b.Constructor):
                self._constructor(c, c.schema.output, list(c.schema.input))
            elif isinstance(c, (b.FunctionCommand, b.Relation)):
                self.functions.append(c.name)
            elif i in rules:
                name, ruleset, place, unites = rules[i]
                self._rule(name, ruleset, path, place)
                if name and unites:
                    self.rewrites.add(name)

    def _rule(self, name: str, ruleset: str, path: str, place: str) -> None:
        if name:
            self.rules[name] = ruleset
            self.rule_places[name] = place
        files = self.rule_files_of.setdefault(ruleset, [])
        if path not in files:
            files.append(path)
        if not ruleset and path not in self.default_ruleset_files:
            self.default_ruleset_files.append(path)


def load_rule_text(eg: b.EGraph, text: str, path: str, declared: Declared, transform=None) -> None:
    """Parse and run one rule file; egglog errors become RuleError(FILE:LINE:COL: ...). A
    command that a rule file may not hold (eqsat.core.rulecommands) is refused before any runs.
    `transform`, if given, maps the parsed commands to the ones run (eqsat.core.provenance)."""
    try:
        with native_stderr():  # a panic's message is the exception's: eqsat prints one line
            cmds = eg.parse_program(text, filename=path)
        refuse_commands(cmds, path, text)  # nothing of the file runs before all pass
        rules = rule_heads(cmds, path, text)
        refuse_clashes(cmds, path, text, declared, rules)
        with native_stderr():
            eg.run_program(*(transform(cmds) if transform else cmds))
    except b.EggSmolError as e:
        raise RuleError(format_egglog_error(str(e), path, text, declared)) from None
    except BaseException as e:  # egglog panics are BaseException (pyo3 PanicException)
        if isinstance(e, INTERRUPTS) or isinstance(e, RuleError):
            raise
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if m := re.match(r"Rule '(.*)' was already present", first):
            raise RuleError(f"{path}: a rule named {m.group(1)} is loaded already (by the default rules or "
                            "another rule file); rename it, or leave out the file that has it") from None
        raise RuleError(f"{path}: egglog failed while loading this file: {first}") from None
    declared.absorb(cmds, path, text, rules)


# The rulesets of the default rules are the phases of the default schedule (rules/schedule.egg),
# declared by the prelude (rules/lang.egg) or rules/layout.egg; a rule file adds rules to them
# with `:ruleset NAME`, and declaring one again is refused with this hint.
PHASE_HINT = ("{name} is a phase of the default schedule, declared by {where}; a rule file does not declare "
              "it again: leave out (ruleset {name}) to add rules to that phase (they keep :ruleset {name} and "
              "run in it), or rename your ruleset (a ruleset of your own runs once per round, after the "
              "default schedule)")


def rule_heads(cmds: list, path: str, text: str) -> dict[int, tuple[str, str, str, bool]]:
    """Each rule command of one file's parsed `cmds`, by its index: (its name, "" where it has
    none; its ruleset; its FILE:LINE:COL; whether it adds an equal form: a rewrite, or a rule
    with a `union` action). One pass, each command's rule read once: every attribute read of
    egglog's parsed commands converts the whole rule into Python objects again."""
    lines = _line_starts(text)
    heads: dict[int, tuple[str, str, str, bool]] = {}
    for i, c in enumerate(cmds):
        if isinstance(c, (b.RewriteCommand, b.BiRewriteCommand)):
            r = c.rewrite
            heads[i] = (getattr(r, "name", ""), c.name, f"{path}:{_line_col(lines, r.span)}", True)  # c.name: ruleset
        elif isinstance(c, b.RuleCommand):
            r = c.rule
            heads[i] = (r.name, r.ruleset, f"{path}:{_line_col(lines, r.span)}",
                        any(isinstance(a, b.Union) for a in r.head))
    return heads


def refuse_clashes(cmds: list, path: str, text: str, declared: Declared,
                   rules: dict[int, tuple[str, str, str, bool]] | None = None) -> None:
    """RuleError, before any command of the file runs, for a ruleset that an earlier file
    (the prelude's phases) declares already, and for a rule named like a loaded rule (the
    default rules' or another file's) or like another rule of this file: egglog would accept
    the rule in another ruleset, and the report would add both rules' matches under one name."""
    from eqsat.core.rulecommands import _place

    mine: dict[str, str] = {}  # rule name -> FILE:LINE:COL
    rules = rule_heads(cmds, path, text) if rules is None else rules
    for i, c in enumerate(cmds):
        if isinstance(c, b.AddRuleset) and c.name in declared.ruleset_files:
            where = _place(cmds, i, path, text)[0]
            other = declared.ruleset_files[c.name]
            if other in {display_path(f) for f in default_rule_files()}:
                raise RuleError(f"{where}: (ruleset {c.name}) cannot be declared: "
                                + PHASE_HINT.format(name=c.name, where=other))
            raise RuleError(f"{where}: (ruleset {c.name}) is declared already by {other}: a ruleset is "
                            f"declared once; leave out this declaration to add rules to it, or rename yours")
        if i not in rules or not rules[i][0]:
            continue
        name, _, here, _ = rules[i]
        other = mine.get(name, declared.rule_places.get(name))
        if other is not None:
            where = here
            theirs = other
            defaults = {display_path(f) for f in default_rule_files()}
            whose = ("another rule of this file" if name in mine else "the default rule"
                     if theirs.rsplit(":", 2)[0] in defaults else "a rule of another file")
            raise RuleError(f"{where}: the rule name {name} is taken by {whose} at {theirs}; rule names are "
                            "unique (the report counts matches by name): rename this rule")
        mine[name] = here


def _line_starts(text: str) -> tuple[bytes, list[int]]:
    """The text as UTF-8 (egglog's spans are byte offsets) and the offsets its lines start at."""
    raw = text.encode("utf-8")
    return raw, [0] + [m.end() for m in re.finditer(b"\n", raw)]


def _line_col(lines: tuple[bytes, list[int]], span) -> str:
    """`LINE:COL` (from 1) of an egglog source span in a text read by _line_starts."""
    import bisect

    raw, starts = lines
    i = getattr(span, "i", 0)
    k = bisect.bisect_right(starts, i) - 1
    return f"{k + 1}:{len(raw[starts[k]:i].decode('utf-8', 'replace')) + 1}"


def check_rule_files(paths) -> None:
    """RuleError (exit 2) for the first of `paths` that is not a readable file: called before
    a command reads its model, so that a mistyped --rules fails at once."""
    import os

    for p in paths:
        shown = display_path(Path(p))
        if not Path(p).is_file():
            raise RuleError(f"{shown}: no such rule file" if not Path(p).exists() else f"{shown}: not a rule file "
                            "(a directory or device)")
        if not os.access(p, os.R_OK):
            raise RuleError(f"{shown}: cannot read rule file: permission denied")


def load_rule_file(eg: b.EGraph, path: Path, declared: Declared, transform=None) -> None:
    shown = display_path(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RuleError(f"{shown}: no such rule file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise RuleError(f"{shown}: cannot read rule file: {e}") from None
    load_rule_text(eg, text, shown, declared, transform)


SPAN_RE = re.compile(r"In (\d+):(\d+)-(\d+) of ([^:\n]*): ?(.*)")  # egglog's source spans


def format_egglog_error(msg: str, path: str, text: str, declared: Declared) -> str:
    """`In 3:5-9 of x.egg: (B x)\\nUnbound function B` -> `PATH:3:5: unknown constructor or
    function B; did you mean Abs?`."""
    # egglog 14 reports a primitive that fails in an action as `Panic: In 1:9-16 of F: (log2 0): ...`
    lines = [ln.strip().removeprefix("Panic: ") for ln in msg.strip().splitlines() if ln.strip()]
    spans = [m for m in (SPAN_RE.match(ln) for ln in lines) if m]
    rest = [ln for ln in lines if not SPAN_RE.match(ln)]
    if spans:
        line, col = int(spans[-1].group(1)), int(spans[-1].group(2))
    else:
        line, col = 1, 1
    body = rest[-1] if rest else spans[-1].group(5) if spans and spans[-1].group(5) else lines[-1] if lines else "error"
    hint = ""
    if "unexpected end of file" in body:
        where = _unclosed_paren(text)
        if where:
            line, col = where
            body = "unclosed '(': this parenthesis is never closed"
    elif "All alternative definitions considered failed" in msg:
        body = "no primitive or constructor accepts these argument types"
        detail = [ln for ln in rest if ln.startswith("Expect")]
        if detail:
            body += f" ({detail[0][0].lower()}{detail[0][1:]}, ...)"
    elif m := re.match(r"Unbound symbol (\S+)", body):
        name = m.group(1)
        body = f"unbound variable {name}"
        known = set(declared.constructors) | set(declared.functions) | set(declared.rulesets) | _KEYWORDS
        known |= set(_rulesets_in(text))
        bound = [v for v in dict.fromkeys(_symbols_near(text, line)) if v not in known and v != name]
        hint = _did_you_mean(name, bound)
        if not hint and bound:
            hint = f"the rule binds {', '.join(bound)}"
    elif m := re.match(r"Unbound function (\S+)", body):
        name = m.group(1)
        body = f"unknown constructor or function {name}"
        hint = _did_you_mean(name, list(declared.constructors) + declared.functions)
    elif m := re.match(r"No such ruleset: (\S+)", body):
        body = f"no such ruleset {m.group(1)}"
        hint = _did_you_mean(m.group(1), declared.rulesets + _rulesets_in(text))
        if not hint:
            hint = f"declare it first with (ruleset {m.group(1)})"
    elif m := re.match(r"Expect expression (.*) to have type (\S+), but get type (\S+)", body):
        body = f"type error: {m.group(1)} has type {m.group(3)} but must have type {m.group(2)}"
    elif "Shadowing is not allowed" in body:
        body = body.replace("Shadowing is not allowed, but found", "name already declared:")
    elif body.startswith("parse error: "):
        body = body.replace("parse error: ", "syntax error: ", 1)
    out = f"{path}:{line}:{col}: {body}"
    return out + (f"; {hint}" if hint else "")


_KEYWORDS = {"rewrite", "birewrite", "rule", "ruleset", "union", "set", "let", "delete", "subsume",
             "panic", "extract", "check", "run", "saturate", "seq", "repeat", "vec-of", "vec-get",
             "vec-length", "vec-empty", "true", "false"}


def _rulesets_in(text: str) -> list[str]:
    """Rulesets a file declares (it failed to load, so egglog did not tell us)."""
    return re.findall(r"\(ruleset\s+([^\s()]+)\)", text)


def _did_you_mean(name: str, candidates: list[str]) -> str:
    cands = [c for c in dict.fromkeys(candidates) if c != name]
    lower = [c for c in cands if c.lower() == name.lower()]
    close = lower or difflib.get_close_matches(name, cands, n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else ""


def _symbols_near(text: str, line: int) -> list[str]:
    """Identifiers of the top-level form that contains `line` (the rule being checked)."""
    lines = text.splitlines()
    start = line - 1
    while start > 0 and not lines[start].startswith("("):
        start -= 1
    end = line
    while end < len(lines) and not lines[end].startswith("("):
        end += 1
    chunk = "\n".join(lines[start:end])
    chunk = re.sub(r";[^\n]*", "", chunk)
    chunk = re.sub(r'"(?:[^"\\]|\\.)*"', "", chunk)
    return re.findall(r"(?<=[\s(])([A-Za-z_][\w\-]*)", chunk)


def _unclosed_paren(text: str) -> tuple[int, int] | None:
    """Line and column of the first '(' that is never closed (strings and comments skipped)."""
    stack: list[tuple[int, int]] = []
    line, col = 1, 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        col += 1
        if c == "\n":
            line, col = line + 1, 0
        elif c == ";":
            while i + 1 < n and text[i + 1] != "\n":
                i += 1
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    line, col = line + 1, 0
                i += 1
        elif c == "(":
            stack.append((line, col))
        elif c == ")" and stack:
            stack.pop()
        i += 1
    return stack[0] if stack else None
