"""A long fuzzing campaign (`make fuzz`, FUZZ_MINUTES=30 by default):

    python -m tests.fuzz.campaign [--minutes M] [--only PROPERTY ...] [--db DIR] [--out DIR]

Runs every property of tests/fuzz/registry.py in turn, in batches, each batch a fresh
worker process (a crash or a hang costs one batch, not the campaign) with random examples,
until the time is up; the time is shared equally between the properties. Failures are
shrunk by hypothesis, saved to the example database (--db, default .hypothesis/fuzz) so
that the next campaign replays them first, and their logs are kept in --out (default
out/fuzz). Prints, per property, the examples run, the clean refusals and discards and the
failed batches; exits 1 if any batch failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIN_BATCH_S = 20.0  # no batch starts with less time than this left
TARGET_BATCH_S = 90.0


def worker(prop: str, examples: int, db: str | None, replay: bool) -> int:
    from . import clirun, profiles, stats
    from .registry import make_test

    test = make_test(prop, profiles.campaign(examples, db, replay))
    try:
        test()
    finally:
        stats.dump()
        clirun.shutdown()
    return 0


def _keep_in_flight(text: str, dest: Path) -> Path | None:
    """Move the temporary folder a killed batch's call was working in (its worker could not
    remove it) to `dest`."""
    import re
    import shutil

    found = re.search(r"(/[^\s'\"]*eqsat-fuzz-[^/\s'\"]+)", text)
    if not found or not Path(found.group(1)).is_dir():
        return None
    shutil.move(found.group(1), dest)
    return dest


def _summary_line(log: str) -> str:
    """The failure's own line from a worker's log: the last line naming an error."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "assert" in ln.lower():
            return ln.strip()[:300]
    return lines[-1][:300] if lines else "(no output)"


def campaign(minutes: float, only: list[str], db: str, out: Path) -> int:
    from . import stats
    from .registry import PROPERTIES

    props = only or list(PROPERTIES)
    unknown = [p for p in props if p not in PROPERTIES]
    if unknown:
        print(f"campaign: unknown properties {unknown}; known: {', '.join(PROPERTIES)}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    deadline = start + minutes * 60
    share = minutes * 60 / len(props)
    spent = dict.fromkeys(props, 0.0)
    rate = dict.fromkeys(props, 5.0)  # seconds per example, measured
    batches = dict.fromkeys(props, 0)
    failures: dict[str, list[str]] = {p: [] for p in props}
    totals: dict = {}
    print(f"campaign: {minutes:g} minutes over {len(props)} properties; database {db}; logs in {out}", flush=True)
    while True:
        left = deadline - time.monotonic()
        if left < MIN_BATCH_S:
            break
        prop = min(props, key=lambda p: spent[p] / share)
        budget = min(TARGET_BATCH_S, left)
        n = max(1, int(budget / rate[prop]))
        stats_file = out / f".stats-{os.getpid()}.json"
        stats_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "tests.fuzz.campaign", "--worker", prop, "--examples", str(n), "--db", db]
        if batches[prop] == 0:
            cmd.append("--replay")
        t0, wall0 = time.monotonic(), time.time()
        log_path = out / f"{prop}-{batches[prop]}.log"
        flight = out / f".in-flight-{os.getpid()}"
        flight.unlink(missing_ok=True)
        env = dict(os.environ, EQSAT_FUZZ_STATS=str(stats_file), EQSAT_FUZZ_IN_FLIGHT=str(flight),
                   EQSAT_FUZZ_FAILURES=str(out / "failures"))
        with open(log_path, "w") as log:
            # its own session: stopping it stops the eqsat worker process it started too
            p = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
            try:
                # a batch slower than its estimate stops at twice its budget, the last at the deadline
                rc = p.wait(timeout=min(left + 30, 2 * budget + 30))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                rc = None  # stopped: its examples so far count, it is no failure
                if flight.exists():
                    kept = _keep_in_flight(flight.read_text(), out / f"{prop}-in-flight-{batches[prop]}")
                    print(f"campaign: {prop}: batch stopped after {time.monotonic() - t0:.0f}s while running "
                          f"{flight.read_text()[:300]}{f' (its folder kept in {kept})' if kept else ''}", flush=True)
        flight.unlink(missing_ok=True)
        took = time.monotonic() - t0
        spent[prop] += took
        batches[prop] += 1
        got = json.loads(stats_file.read_text()) if stats_file.exists() else {}
        stats_file.unlink(missing_ok=True)
        stats.merge(totals, got)
        ran = got.get(prop, {}).get("counts", {}).get("examples", 0)
        shrunk = out / "failures" / prop
        if rc is None and (shrunk / "failure.txt").exists() and (shrunk / "failure.txt").stat().st_mtime > wall0:
            rc = "stopped"  # a failure found, still shrinking when stopped
        if ran and rc in (0, None):  # a failing batch stops early and shrinks: no measure of the rate
            rate[prop] = max(0.05, took / ran)
        if rc not in (0, None):
            line = _summary_line(log_path.read_text(errors="replace"))
            failures[prop].append(f"{log_path}: {line}" + (f" (inputs: {shrunk})" if shrunk.exists() else ""))
            print(f"campaign: {prop}: FAILED (exit {rc}): {line}", flush=True)
        else:
            log_path.unlink(missing_ok=True)
        print(f"campaign: {prop}: batch {batches[prop]}: {ran} examples in {took:.0f}s "
              f"({(time.monotonic() - start) / 60:.1f} of {minutes:g} min)", flush=True)
    total = sum(d["counts"].get("examples", 0) for d in totals.values())
    n_fail = sum(len(v) for v in failures.values())
    print(f"\ncampaign: {(time.monotonic() - start) / 60:.1f} minutes, {total} examples, {n_fail} failures")
    for line in stats.lines(totals, {p: len(v) for p, v in failures.items()}):
        print(line)
    for p, fs in failures.items():
        for f in fs:
            print(f"FAILED {p}: {f}")
    return 1 if n_fail else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz.campaign", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("FUZZ_MINUTES", "30") or 30))
    ap.add_argument("--only", action="append", default=[], metavar="PROPERTY")
    ap.add_argument("--db", default=str(ROOT / ".hypothesis" / "fuzz"))
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "fuzz")
    ap.add_argument("--worker", metavar="PROPERTY", help=argparse.SUPPRESS)
    ap.add_argument("--examples", type=int, default=10, help=argparse.SUPPRESS)
    ap.add_argument("--replay", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.worker, a.examples, a.db, a.replay)
    return campaign(a.minutes, a.only, a.db, a.out)


if __name__ == "__main__":
    sys.exit(main())
