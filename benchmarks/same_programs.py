#!/usr/bin/env python
"""Same programs before and after a change that should not alter them (a refactor): each
model is optimized by eqsat as of REV (its eqsat/, extract/ and rules/ exported with
`git archive`, run from that folder) and by this checkout, with --no-verify, and the two
output graphs are compared byte for byte.

    python benchmarks/same_programs.py --old REV MODEL.onnx...

Prints one row per model: nodes before, nodes after at REV and here, and whether the graphs
are identical; exits 1 when any differs or a run fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent


def export(rev: str, into: Path) -> Path:
    """eqsat/, extract/ and rules/ of `rev`, with extract/ and rules/ also where the package
    expects them installed (eqsat/extract, eqsat/rules), so that nothing of this checkout is
    imported when it runs from `into`."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "eqsat", "extract", "rules"], capture_output=True,
                         check=True).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    for name in ("extract", "rules"):
        link = into / "eqsat" / name
        if not link.exists():
            link.symlink_to(into / name)
    return into


def optimize(cwd: Path, src: Path, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "eqsat", "optimize", str(src), "-o", str(out), "--no-verify", "-q"],
                   cwd=cwd, check=True, timeout=1800)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, metavar="REV", help="the revision to compare with")
    ap.add_argument("models", nargs="+", type=Path)
    args = ap.parse_args(argv)
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        old = export(args.old, Path(tmp) / "old")
        print(f"| model | nodes | at {args.old} | here | graphs |\n|---|---|---|---|---|")
        for src in args.models:
            a, b = Path(tmp) / f"{src.stem}.old.onnx", Path(tmp) / f"{src.stem}.new.onnx"
            try:
                optimize(old, src.resolve(), a)
                optimize(ROOT, src.resolve(), b)
            except subprocess.CalledProcessError as e:
                print(f"| {src.stem} | | | | run failed: {e} |")
                differ += 1
                continue
            ga, gb = (onnx.load(str(p), load_external_data=False).graph for p in (a, b))
            n = len(onnx.load(str(src), load_external_data=False).graph.node)
            same = ga.SerializeToString() == gb.SerializeToString()
            differ += not same
            print(f"| {src.stem} | {n} | {len(ga.node)} | {len(gb.node)} | {'identical' if same else 'DIFFERENT'} |")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
