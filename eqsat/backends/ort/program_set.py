"""Program sets: the programs compare-costs timed, kept as JSON to time again or to score a
new cost model against old measurements (`compare-costs --save-programs` / `--programs`).

    {"format": 1, "what": "eqsat compare-costs program set", "egraph_digest": "...",
     "settings": {...the e-graph's eqsat.settings...}, "run": {...seed, runs, machine, software...},
     "feature_names": [...extract.features.FEATURE_NAMES...],
     "programs": [{"kind": "uniform", "choice": {"<e-class>": "<node id>", ...}, "nodes": 12,
                   "samples_ms": [0.081, ...], "features": [...]}, ...],
     "noise_floor": {...}}

`features`: the sum over the program's operator nodes of extract.features.vector (at the run's
`--dim` sizes, `roofline_us` on the profile of the e-graph's settings), what `eqsat calibrate
--learn` fits a learned cost model to; absent in sets written before eqsat stored them.

`egraph_digest` (extract's EGraph.digest) says which e-graph the node ids belong to: a set
made on another e-graph is refused (extract.choice_file.same_egraph says why).
"""

from __future__ import annotations

import json
from pathlib import Path

from eqsat.errors import InputError
from eqsat.extract import EGraph
from eqsat.extract.check import ExtractionError, check
from eqsat.extract.choice_file import same_egraph

FORMAT = 1
WHAT = "eqsat compare-costs program set"


def as_json(eg: EGraph, programs: list[dict[str, str]], kinds: list[str], samples: list[list[float]],
            nodes: list[int], run: dict, noise_floor: dict | None) -> dict:
    from eqsat.extract.features import FEATURE_NAMES, features, program_vector

    feats = features(eg, run.get("settings", {}).get("dims") or {}, profile_of(eg))
    return {"format": FORMAT, "what": WHAT, "egraph_digest": eg.digest(), "settings": eg.meta.get("settings", {}),
            "run": run, "noise_floor": noise_floor, "feature_names": list(FEATURE_NAMES),
            "programs": [{"kind": k, "choice": p, "nodes": n, "samples_ms": s,
                          "features": program_vector(eg, p, feats)}
                         for p, k, s, n in zip(programs, kinds, samples, nodes, strict=True)]}


def profile_of(eg: EGraph) -> str:
    """The hardware profile the e-graph was saturated for (its settings), `cpu` if unrecorded."""
    return str(eg.meta.get("settings", {}).get("hardware") or "cpu")


def read(path: str | Path) -> dict:
    """The program set in `path`; InputError naming the file and what is wrong with it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a program set: cannot read it as JSON ({e})") from None
    if not isinstance(data, dict) or data.get("what") != WHAT or not isinstance(data.get("programs"), list):
        raise InputError(f"{path}: not a program set (compare-costs --save-programs writes one)")
    if not isinstance(data.get("format"), int) or data["format"] > FORMAT:
        raise InputError(f"{path}: program set format {data.get('format')!r} is not one this eqsat reads ({FORMAT})")
    for i, p in enumerate(data["programs"]):
        ok = isinstance(p, dict) and isinstance(p.get("choice"), dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in p["choice"].items())
        ok = ok and isinstance(p.get("samples_ms", []), list) and all(
            isinstance(x, int | float) and not isinstance(x, bool) and x > 0 for x in p.get("samples_ms", []))
        if not ok:
            raise InputError(f"{path}: program {i + 1}: expected {{\"choice\": {{e-class: node id}}, "
                             "\"samples_ms\": [milliseconds > 0, ...]}")
    return data


def programs_of(data: dict, eg: EGraph, path: str | Path) -> tuple[list[dict[str, str]], list[str]]:
    """The set's programs and kinds, each checked to be a program of `eg`; InputError when
    the set was made on another e-graph or a choice is not a valid program here."""
    if why := same_egraph(data, eg):
        raise InputError(f"{path}: this program set cannot be used here: {why}")
    progs, kinds = [], []
    for i, p in enumerate(data["programs"]):
        try:
            check(eg, p["choice"])
        except ExtractionError as e:
            raise InputError(f"{path}: program {i + 1} is not a valid program of this e-graph: {e}") from None
        progs.append(dict(p["choice"]))
        kinds.append(str(p.get("kind", "")))
    return progs, kinds
