"""docs/writing-rules.md runs as written: its files are written to a scratch directory and
its commands run there with the exit codes the document states, so the tutorial cannot
rot. Markers: `<!-- file: NAME -->` before a code block writes it to NAME;
`<!-- exit: N -->` before a console block expects exit code N from each `$` line."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "writing-rules.md"
_MARK = re.compile(r"<!--\s*(file|exit):\s*(\S+)\s*-->")


def blocks(text: str) -> list[dict]:
    """Code blocks in order: {'lang', 'body', 'file', 'exit'}."""
    out, marks, lines, i = [], {}, text.splitlines(), 0
    while i < len(lines):
        ln = lines[i]
        m = _MARK.fullmatch(ln.strip())
        if m:
            marks[m.group(1)] = m.group(2)
        elif ln.startswith("```"):
            lang = ln[3:].strip()
            j = i + 1
            while not lines[j].startswith("```"):
                j += 1
            out.append({"lang": lang, "body": "\n".join(lines[i + 1:j]) + "\n", "file": marks.get("file"),
                        "exit": int(marks.get("exit", 0))})
            marks, i = {}, j
        i += 1
    return out


def _argv(cmd: str) -> list[str]:
    argv = shlex.split(cmd)
    if argv[0] == "eqsat":
        return [sys.executable, "-m", "eqsat"] + argv[1:]
    if argv[0] == "python":
        return [sys.executable] + argv[1:]
    raise AssertionError(f"the tutorial runs a command the test does not know: {cmd}")


def run_doc(doc: Path, tmp_path: Path) -> list[tuple[str, subprocess.CompletedProcess]]:
    """Write the document's files and run its commands in order; each command's exit code
    must be the one the document states. Returns (command line, result) in order."""
    ran = []
    for b in blocks(doc.read_text(encoding="utf-8")):
        if b["file"]:
            (tmp_path / b["file"]).write_text(b["body"], encoding="utf-8")
            continue
        assert b["lang"] == "console", f"{doc.name}: a code block that is neither a file nor commands:\n{b['body']}"
        for line in b["body"].splitlines():
            if not line.startswith("$ "):
                continue
            p = subprocess.run(_argv(line[2:]), cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert p.returncode == b["exit"], (
                f"{doc.name}: {line}: exit {p.returncode}, the document says {b['exit']}\n{p.stdout}\n{p.stderr}")
            ran.append((line, p))
    return ran


def test_tutorial_runs(tmp_path):
    assert any(b["lang"] == "lisp" and b["file"] for b in blocks(DOC.read_text(encoding="utf-8"))), \
        "the tutorial writes a rule file"
    ran = run_doc(DOC, tmp_path)
    cmds = [c for c, _ in ran]
    assert "$ eqsat rules check silu.egg -v" in cmds
    assert any(c.startswith("$ eqsat optimize") and "--rules silu.egg" in c for c in cmds)
    wrong = dict(ran)["$ eqsat rules check silu-wrong.egg"]
    assert "silu-wrong: UNSOUND" in wrong.stdout and "before:" in wrong.stdout and "after:" in wrong.stdout
    listed = dict(ran)["$ eqsat rules list --rules silu.egg --no-default-rules"]
    assert "silu-fuse " in listed.stdout and "x * Sigmoid(x) -> QuickGelu" in listed.stdout
    assert (tmp_path / "silu.opt.onnx").is_file()
    # the variadic example: a rule over Min's list of inputs, checked and run
    lisp = [b["body"] for b in blocks(DOC.read_text(encoding="utf-8")) if b["lang"] == "lisp"]
    assert any("(Cons " in body and "(Nil)" in body for body in lisp), "a rule with a variadic input"
    assert "relu6-clip: ok" in dict(ran)["$ eqsat rules check relu6.egg -v"].stdout
    assert any(c.startswith("$ eqsat optimize relu6.onnx") for c in cmds)
    assert (tmp_path / "relu6.opt.onnx").is_file()


def test_extraction_page_runs(tmp_path):
    """docs/extraction.md: a saved e-graph, every extractor under two cost models, a
    registered extractor and cost model through the command line, a choice decoded."""
    ran = dict(run_doc(DOC.parent / "extraction.md", tmp_path))
    table = ran["$ python compare.py"].stdout.splitlines()
    # four extractors under two models; the ILP is the optimal one (ilp-fixed-layouts is exact
    # only for the layouts it fixed)
    assert len(table) == 8 and sum("optimal=True" in ln for ln in table) == 2
    assert (tmp_path / "first.onnx").is_file()
    assert ran["$ python decode.py"].stdout.strip().endswith("nodes; passed")
    lines = ran["$ eqsat extract model.egraph.json --extractor ilp --extractor dag-greedy --extractor tree-greedy "
                "--cost-model node-count --cost-model roofline"].stdout.splitlines()
    assert len(lines) == 6 and sum("(optimal)" in ln or "proven optimal" in ln for ln in lines) == 2
    assert "valid for model.egraph.json" in ran["$ eqsat extract model.egraph.json --check choice.json"].stdout
    assert (tmp_path / "chosen.onnx").is_file()
