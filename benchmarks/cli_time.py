"""End-to-end time and peak memory of `eqsat optimize` (load, check, optimize, verify,
save) at several revisions of this repository, interleaved: what a user waits for, where
opt_time.py times the optimization call alone.

    python benchmarks/cli_time.py --rev HEAD --rev bf25d4d [--only gpt2-kv,bert-base]
                                  [--models DIR] [--rounds 5] [--out-dir /dev/shm]
                                  [--out benchmarks/results/cli_time.md]

Each revision is exported with `git archive` into a temporary folder and run from there
(`python -m eqsat`, started from the temporary folder with SITE's sitecustomize, which
points the editable install's finder at that folder: no checkout's package shadows it), in fresh child processes,
alternating revisions within each round and the order between rounds. Reports per model and revision the median wall,
user and system seconds and peak resident memory (the child's ru_maxrss), and each
revision's median wall over the first's. The optimized models go to `--out-dir` (default:
a temporary folder); /dev/shm keeps the disk's write speed, which moves by seconds on a
shared virtual disk, out of the figure. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import peers  # noqa: E402

# Each child runs `python -m eqsat` with this sitecustomize first on PYTHONPATH, and so does
# every process it starts (verification's child): an editable install maps eqsat, eqsat.extract
# and eqsat.rules to the checkout it was made from whatever sys.path says, so its finder's maps
# are pointed at the revision's folder (EQSAT_BENCH_SRC), which also goes first on sys.path
# (older revisions import `extract` as a top-level package).
SITE = """import os, sys
src = os.environ.get("EQSAT_BENCH_SRC")
if src:
    for name, m in list(sys.modules.items()):
        if name.startswith("__editable___eqsat") and hasattr(m, "MAPPING"):
            m.MAPPING.update({"eqsat": src + "/eqsat", "eqsat.extract": src + "/extract",
                              "eqsat.rules": src + "/rules"})
            m.NAMESPACES.update({"eqsat.rules": [src + "/rules"],
                                 "eqsat.extract.hardware": [src + "/extract/hardware"]})
    sys.path.insert(0, src)
"""


def child_env(src: Path, site: Path) -> dict[str, str]:
    """The environment of a child that runs revision `src` (SITE written into folder `site`)."""
    (site / "sitecustomize.py").write_text(SITE)
    return {**os.environ, "PYTHONPATH": str(site), "EQSAT_BENCH_SRC": str(src)}


def commits(revs: list[str]) -> list[str]:
    """The short commit of each revision; SystemExit where two name the same commit."""
    shas = [subprocess.run(["git", "rev-parse", "--short", r], cwd=ROOT, check=True, capture_output=True,
                           text=True).stdout.strip() for r in revs]
    if len(set(shas)) < len(shas):
        raise SystemExit(f"cli_time: --rev {' '.join(revs)} name the same commit twice ({' '.join(shas)})")
    return shas


def export(sha: str, into: Path) -> tuple[str, Path]:
    """(sha, folder) with the commit's tracked files, extracted under `into`."""
    folder = into / sha
    folder.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", sha], cwd=ROOT, check=True,
                             capture_output=True).stdout
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(folder, filter="data")
    return sha, folder


def run_once(src: Path, model: Path, out: Path, cwd: Path) -> dict:
    """One `eqsat optimize -q` in a child: wall, user and system seconds, peak RSS in MiB."""
    cmd = [sys.executable, "-m", "eqsat", "optimize", "-q", str(model), "-o", str(out)]
    site = cwd / "site"
    site.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=child_env(src, site), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with p.stderr:
        err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)  # the child's own rusage (Popen.wait would not give it)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    for f in (out, out.with_name(out.name + ".data")):
        f.unlink(missing_ok=True)
    if p.returncode:
        raise RuntimeError(f"{model.name} at {src.name}: exit {p.returncode}: {err.decode()[-500:]}")
    return {"wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime, "rss_mib": ru.ru_maxrss / 1024}


def measure(models: list[Path], revs: list[str], rounds: int, out_dir: Path | None) -> dict:
    """{model: {commit: [run dicts]}}, the revisions alternating within each round."""
    res: dict[str, dict[str, list[dict]]] = {}
    shas = commits(revs)
    with tempfile.TemporaryDirectory(prefix="eqsat-cli-time-") as tmp, \
            tempfile.TemporaryDirectory(prefix="eqsat-cli-out-", dir=out_dir) as outs:
        trees = [export(sha, Path(tmp)) for sha in shas]
        for model in models:
            runs = res.setdefault(model.stem, {sha: [] for sha, _ in trees})
            for i in range(rounds):
                order = trees if i % 2 == 0 else trees[::-1]
                for sha, folder in order:
                    subprocess.run(["sync"], check=False)  # the last run's writes, flushed before this one
                    r = run_once(folder, model, Path(outs) / f"{sha}.onnx", Path(tmp))
                    runs[sha].append(r)
                    print(f"{model.stem} {sha} round {i + 1}: {r['wall_s']:.2f} s, {r['rss_mib']:.0f} MiB",
                          file=sys.stderr)
    return res


def table(res: dict) -> list[str]:
    lines = ["| model | commit | runs | wall s | user s | sys s | peak RSS MiB | wall / first |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for model, by_rev in res.items():
        first = None
        for sha, runs in by_rev.items():
            med = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "user_s", "sys_s", "rss_mib")}
            first = first or med["wall_s"]
            lines.append(f"| {model} | {sha} | {len(runs)} | {med['wall_s']:.2f} | {med['user_s']:.2f} | "
                         f"{med['sys_s']:.2f} | {med['rss_mib']:.0f} | {med['wall_s'] / first:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", action="append", required=True, help="a git revision (give two or more)")
    ap.add_argument("--models", type=Path, default=ROOT / "benchmarks" / "models")
    ap.add_argument("--only", default="gpt2-kv,bert-base", help="comma-separated model names")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out-dir", type=Path, default=None, help="where the optimized models are written")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cli_time.md")
    args = ap.parse_args(argv)
    models = [args.models / f"{m}.onnx" for m in args.only.split(",")]
    missing = [str(m) for m in models if not m.exists()]
    if missing:
        ap.error(f"no such model: {', '.join(missing)} (build the corpus: make corpus)")
    res = measure(models, args.rev, args.rounds, args.out_dir)
    cmd = "python benchmarks/cli_time.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    text = ["# `eqsat optimize` end to end, by revision", "",
            f"Command: `{cmd}`. Written by `benchmarks/cli_time.py`.", "",
            f"Machine: {peers._machine()}. {peers._versions()}.", "",
            "Method: each revision's tracked files (`git archive`) run `python -m eqsat optimize -q MODEL -o OUT` "
            "with its defaults (verification on) in fresh child processes, revisions alternating within a "
            f"round, {args.rounds} rounds, `sync` before each run; medians of wall, user and system seconds "
            "and peak resident memory. " + (f"Output in {args.out_dir}." if args.out_dir else
                                            "Output in a temporary folder."), "",
            *table(res), ""]
    args.out.write_text("\n".join(text))
    print("\n".join(table(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
