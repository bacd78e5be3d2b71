"""Optimization time of eqsat beside other tools, interleaved: a fairer figure than
peers.py's one run per tool, which lands at different moments of a long run (on this
project's shared machines the same tool's time moved 1.5x between runs).

    python benchmarks/opt_time.py [--models DIR] [--only bert-base,...] [--tools eqsat,onnxsim]
                                  [--rounds 5] [--out benchmarks/results/opt_time.md]

Each round runs every tool once on the model, each in a fresh child process (peers.run_child:
import and start-up not counted, the optimization call alone timed as peers.py times it), in
a fresh random order that never starts with the tool that ended the round before
(`round_orders`), so that the machine's drifting load falls on all tools alike. Reports
per model and tool the median, min and max seconds, and each tool's ratio to the first
tool's median (the median of the per-round ratios beside it). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import peers  # noqa: E402
from benchmarks.symdims import dims_for  # noqa: E402


def time_rounds(src: Path, tools: list[str], rounds: int, timeout: float = 1800.0, seed: int = 0,
                work: Path | None = None) -> dict[str, list[float]]:
    """{tool: [optimization seconds per round]}; a failed run raises RuntimeError."""
    import onnx

    dims = dims_for(onnx.load(str(src), load_external_data=False))
    times: dict[str, list[float]] = {t: [] for t in tools}
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        for perm in peers.round_orders(len(tools), rounds, seed):
            for j in perm:
                tool = tools[j]
                job = {"kind": "time", "tool": tool, "src": str(src), "dst": str(Path(tmp) / f"{tool}.onnx"),
                       "dims": dims}
                rec = peers.run_child(job, timeout)
                if "error" in rec:
                    raise RuntimeError(f"{src.stem} {tool}: {rec['error']}")
                times[tool].append(rec["opt_s"])
    return times


def summarize(times: dict[str, list[float]]) -> list[dict]:
    """One row per tool: median, min, max, ratio of its median to the first tool's, and the
    median of the per-round ratios (round i of each tool ran in the same round)."""
    ref = next(iter(times.values()))
    rows = []
    for tool, ts in times.items():
        rows.append({"tool": tool, "runs": len(ts), "median_s": statistics.median(ts), "min_s": min(ts),
                     "max_s": max(ts), "ratio": statistics.median(ts) / statistics.median(ref),
                     "paired_ratio": statistics.median(a / b for a, b in zip(ts, ref, strict=True))})
    return rows


def write(results: dict[str, list[dict]], path: Path, command: str) -> None:
    lines = ["# Optimization time, interleaved", "",
             f"Command: `{command}`", "",
             f"Machine: {peers._machine()}. {peers._versions()}.", "",
             "Each round runs every tool once, each in a fresh child process, in a random order; the "
             "optimization call alone is timed (model in memory -> model in memory). Ratio: the "
             "tool's median over the first tool's; per round: the median of the per-round ratios.", "",
             "| model | tool | runs | median s | min s | max s | ratio | per round |",
             "|---|---|---|---|---|---|---|---|"]
    for model, rows in results.items():
        for r in rows:
            lines.append(f"| {model} | {r['tool']} | {r['runs']} | {r['median_s']:.2f} | {r['min_s']:.2f} | "
                         f"{r['max_s']:.2f} | {r['ratio']:.2f} | {r['paired_ratio']:.2f} |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=Path, default=ROOT / "benchmarks/models")
    ap.add_argument("--only", default="bert-base", help="comma-separated model names (default bert-base)")
    ap.add_argument("--tools", default="eqsat,onnxsim", help="comma-separated; the first is the reference")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per child process")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/opt_time.md")
    a = ap.parse_args(argv)
    tools = [t for t in a.tools.split(",") if t]
    for t in tools:
        why = peers.missing(t)  # an unknown tool or one not installed
        if why:
            ap.error(why)
    results = {}
    for name in [m for m in a.only.split(",") if m]:
        src = a.models / f"{name}.onnx"
        if not src.is_file():
            ap.error(f"no model {src}; build the corpus first (make corpus)")
        rows = summarize(time_rounds(src, tools, a.rounds, a.timeout))
        results[name] = rows
        for r in rows:
            print(f"{name} {r['tool']}: median {r['median_s']:.2f} s ({r['min_s']:.2f} to {r['max_s']:.2f}), "
                  f"ratio {r['ratio']:.2f}, per round {r['paired_ratio']:.2f}", flush=True)
    args = argv if argv is not None else sys.argv[1:]
    write(results, a.out, "python benchmarks/opt_time.py " + " ".join(shlex.quote(x) for x in args))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
