"""What the fuzz properties saw, per property: examples run, clean refusals (by message),
discarded cases (by reason). Printed at the end of a pytest run over tests/fuzz and merged
by the campaign (tests/fuzz/campaign.py) from each worker's JSON file."""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

COUNTS: dict[str, Counter] = defaultdict(Counter)
REFUSALS: dict[str, Counter] = defaultdict(Counter)
DISCARDS: dict[str, Counter] = defaultdict(Counter)


def key(message: str) -> str:
    """A message with paths and numbers blanked, so that refusals of one kind group."""
    m = re.sub(r"/[^\s:'\"]+", "PATH", message)
    m = re.sub(r"\b\d+(\.\d+)?\b", "#", m)
    return m[:110]


_last_dump = [0.0]


def example(prop: str) -> None:
    """Count one example; every few seconds, also `dump` (a campaign's worker stopped at its
    deadline keeps its count)."""
    COUNTS[prop]["examples"] += 1
    now = time.monotonic()
    if now - _last_dump[0] > 2.0:
        _last_dump[0] = now
        dump()


def refused(prop: str, message: str) -> None:
    COUNTS[prop]["refused"] += 1
    REFUSALS[prop][key(message)] += 1


def discarded(prop: str, reason: str) -> None:
    COUNTS[prop]["discarded"] += 1
    DISCARDS[prop][key(reason)] += 1


def as_dict() -> dict:
    return {p: {"counts": dict(COUNTS[p]), "refusals": dict(REFUSALS[p]), "discards": dict(DISCARDS[p])}
            for p in sorted(COUNTS)}


def dump() -> None:
    """Write the counts to $EQSAT_FUZZ_STATS, when set."""
    path = os.environ.get("EQSAT_FUZZ_STATS")
    if path:
        Path(path).write_text(json.dumps(as_dict(), indent=1))


def merge(into: dict, other: dict) -> dict:
    for prop, d in other.items():
        slot = into.setdefault(prop, {"counts": {}, "refusals": {}, "discards": {}})
        for part in ("counts", "refusals", "discards"):
            for k, v in d.get(part, {}).items():
                slot[part][k] = slot[part].get(k, 0) + v
    return into


def lines(data: dict, failures: dict[str, int] | None = None, top: int = 3) -> list[str]:
    out = []
    for prop, d in sorted(data.items()):
        c = d["counts"]
        fail = f", {failures.get(prop, 0)} failed" if failures is not None else ""
        out.append(f"{prop}: {c.get('examples', 0)} examples ({c.get('refused', 0)} refused cleanly, "
                   f"{c.get('discarded', 0)} discarded){fail}")
        for k, v in Counter(d["refusals"]).most_common(top):
            out.append(f"    refused {v}x: {k}")
        for k, v in Counter(d["discards"]).most_common(top):
            out.append(f"    discarded {v}x: {k}")
    return out
