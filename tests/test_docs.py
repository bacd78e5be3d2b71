"""The documentation cannot drift: README.md stays one screen, every relative link of
README.md, docs/*.md and benchmarks/README.md leads to an existing file (and an #anchor to
an existing heading), every `eqsat ...` command line shown in a console or sh block of
README.md and docs/*.md is accepted by the command line's parser, and docs/cli.md names
every command and option the parser has.

A block whose commands are meant to be refused by the parser is preceded by
`<!-- cli: rejected -->`; its commands must then fail to parse."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from eqsat.cli.main import build_parser
from eqsat.errors import EqsatError

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
CLI_DOC = ROOT / "docs" / "cli.md"
README_LIMIT = 8000  # characters: one screen (issue 28)

_FENCE = re.compile(r"^(```+|~~~+)")
_MARK = re.compile(r"<!--\s*cli:\s*(\S+)\s*-->")
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def blocks(text: str) -> list[dict]:
    """Fenced code blocks in order: {'lang', 'lines', 'mark'} (mark: a `<!-- cli: ... -->`
    comment right before the block, else None)."""
    out, lines, i, mark = [], text.splitlines(), 0, None
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            fence, lang = m.group(1), lines[i][len(m.group(1)):].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith(fence):
                j += 1
            out.append({"lang": lang, "lines": lines[i + 1:j], "mark": mark})
            mark, i = None, j + 1
            continue
        mk = _MARK.fullmatch(lines[i].strip())
        if mk:
            mark = mk.group(1)
        elif lines[i].strip():
            mark = None
        i += 1
    return out


def outside_fences(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    kept, fence = [], None
    for ln in text.splitlines():
        m = _FENCE.match(ln)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if ln.startswith(fence):
                fence = None
            continue
        kept.append(ln)
    return kept


def prose(text: str) -> str:
    """The text outside fenced code blocks and code spans (links inside code are not links)."""
    return "\n".join(_CODE_SPAN.sub("", ln) for ln in outside_fences(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, code marks and punctuation but hyphens
    and underscores dropped, spaces to hyphens."""
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for ln in outside_fences(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", ln.replace("`", ""))
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def test_readme_is_one_screen():
    n = len(README.read_text(encoding="utf-8"))
    assert n <= README_LIMIT, f"README.md is {n} characters, more than {README_LIMIT}: move details into docs/"


def test_readme_shows_setup_and_quick_starts():
    text = README.read_text(encoding="utf-8")
    for must in ("make demo", "make test", ".[cpu]", ".[gpu]",
                 "eqsat optimize model.onnx -o model.opt.onnx --report report.json", "eqsat.optimize("):
        assert must in text, f"README.md lost {must!r}"
    for b in blocks(text):
        if b["lang"] == "python":
            compile("\n".join(b["lines"]), "README.md", "exec")  # the quick start is Python


LINKED = [README, *DOCS, ROOT / "benchmarks" / "README.md"]


@pytest.mark.parametrize("doc", LINKED, ids=_rel)
def test_relative_links_resolve(doc):
    bad = []
    for target in _LINK.findall(prose(doc.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {_rel(dest)}")
        elif anchor and dest.suffix != ".md":
            bad.append(f"{target}: an anchor into a file that is not Markdown")
    assert not bad, f"{_rel(doc)}: broken links:\n" + "\n".join(bad)


def test_anchor_slugs():
    assert slug("eqsat show and eqsat diff") == "eqsat-show-and-eqsat-diff"
    assert slug("The channel-blocked layout (NCHWc)") == "the-channel-blocked-layout-nchwc"
    assert slug("compare-costs") == "compare-costs"


def commands(doc: Path) -> list[tuple[str, list[str], str | None]]:
    """The `eqsat ...` command lines of a document's console and sh blocks, as
    (line, argv after `eqsat`, mark). Console blocks: the `$ ` lines; sh blocks: every line.
    A trailing backslash continues a line; comments and leading VAR=value are dropped."""
    out = []
    for b in blocks(doc.read_text(encoding="utf-8")):
        if b["lang"] not in ("console", "sh", "shell", "bash"):
            continue
        lines, pending = [], ""
        for ln in b["lines"]:
            if b["lang"] == "console" and not pending:
                if not ln.startswith("$ "):
                    continue
                ln = ln[2:]
            if ln.rstrip().endswith("\\"):
                pending += ln.rstrip()[:-1] + " "
                continue
            lines.append(pending + ln)
            pending = ""
        for line in lines:
            argv = shlex.split(line, comments=True)
            while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
                argv = argv[1:]
            if argv and argv[0] == "eqsat":
                out.append((line.strip(), argv[1:], b["mark"]))
    return out


def parses(argv: list[str]) -> str | None:
    """None where the `eqsat` parser accepts argv as `eqsat.cli.main.main` reads it, else why not."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
    except (EqsatError, SystemExit) as e:
        return str(e) or type(e).__name__
    if extra:
        return f"unrecognized arguments: {' '.join(extra)}"
    if args.command is None:
        return "no command"
    known = {o for _, sub in _subcommands(parser) for a in sub._actions for o in a.option_strings}
    if short := [a for a in argv if a.startswith("--") and a.split("=")[0] not in known]:
        return f"abbreviated or unknown options (argparse accepts prefixes; write them out): {' '.join(short)}"
    return None


@pytest.mark.parametrize("doc", [README, *DOCS], ids=_rel)
def test_shown_commands_parse(doc, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # outputs such as `-o model.opt.onnx` are checked where they would be written
    cmds = commands(doc)
    if doc in (README, CLI_DOC):
        assert cmds, f"{_rel(doc)} shows no eqsat command line in a console or sh block"
    bad = []
    for line, argv, mark in cmds:
        why = parses(argv)
        if mark == "rejected":
            if why is None:
                bad.append(f"{line}: marked rejected, but the parser accepts it")
        elif mark is not None:
            bad.append(f"{line}: unknown mark <!-- cli: {mark} -->")
        elif why is not None:
            bad.append(f"{line}: {why}")
    capsys.readouterr()  # the usage lines of refused commands
    assert not bad, f"{_rel(doc)}: command lines the CLI does not accept:\n" + "\n".join(bad)


def test_commands_helper():
    doc = "\n".join(["<!-- cli: rejected -->", "```console", "$ eqsat optimize --bogus \\", "    m.onnx",
                     "output", "```", "```sh", "X=1 eqsat plan m.onnx  # comment", "make demo", "```",
                     "```text", "eqsat optimize IN.onnx [-o OUT.onnx]", "```"])
    path = Path(__import__("tempfile").mkdtemp()) / "d.md"
    path.write_text(doc, encoding="utf-8")
    got = commands(path)
    assert [(a, m) for _, a, m in got] == [(["optimize", "--bogus", "m.onnx"], "rejected"), (["plan", "m.onnx"], None)]
    assert parses(["optimize", "--bogus", "m.onnx"]) is not None
    assert parses(["plan", "m.onnx"]) is None
    assert parses(["optimize", "m.onnx", "--no-default"]) is not None  # a prefix argparse would take


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(command path, parser) for every command and nested subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _subcommands(sub, (*prefix, name))


def test_cli_doc_names_every_command_and_option():
    text = CLI_DOC.read_text(encoding="utf-8")
    missing = []
    for path, sub in _subcommands(build_parser()):
        name = "eqsat " + " ".join(path)
        if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text):
            missing.append(name)
        for action in sub._actions:
            for opt in action.option_strings:
                if opt in ("-h", "--help"):
                    continue
                if not re.search(rf"`[^`\n]*(?<![\w-]){re.escape(opt)}(?![\w-])[^`\n]*`", text):
                    missing.append(f"{name} {opt}")
    assert not missing, "docs/cli.md does not document: " + ", ".join(missing)
