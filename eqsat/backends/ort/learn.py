"""`eqsat calibrate --learn`: the learned cost model's weights (extract/costs/learned.py),
fitted to program sets measured on this machine (`compare-costs --save-programs`), written
into a hardware profile; program sets held out of the fit are scored, not fitted.

Each program is one row: its feature sum (stored in the set) and the median of its timed
runs. The profile written is the base profile (`--hardware`, default the one the sets were measured
with: their features' roofline estimates are that profile's) with a `learned`
section: the feature names, the weights, the sets it was trained on (file, e-graph digest,
programs) and its scores on them and on the held-out sets.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from eqsat.backends.ort import program_set
from eqsat.errors import InputError
from eqsat.extract.costs import Hardware
from eqsat.extract.costs.learned import evaluate, fit, predict
from eqsat.extract.costs.roofline import HARDWARE_DIR
from eqsat.extract.features import FEATURE_NAMES


def rows_of(path: str | Path) -> tuple[dict, list[tuple[list[float], float]]]:
    """The set in `path` and its rows (feature sum, median time in microseconds); InputError
    when the set has no features or other ones than this eqsat's."""
    data = program_set.read(path)
    if data.get("feature_names") != list(FEATURE_NAMES) or not all(
            isinstance(p.get("features"), list) and len(p["features"]) == len(FEATURE_NAMES)
            for p in data["programs"]):
        raise InputError(f"{path}: this program set holds no features of this eqsat's kind ({', '.join(FEATURE_NAMES)})"
                         "; measure it again with `eqsat compare-costs MODEL --save-programs FILE`")
    rows = [([float(x) for x in p["features"]], 1000.0 * statistics.median(p["samples_ms"]))
            for p in data["programs"] if p.get("samples_ms")]
    if not rows:
        raise InputError(f"{path}: no program of this set was timed (it was saved with --no-time?)")
    return data, rows


def learn(sets: list[str | Path], hold_out: list[str | Path], base: str | None = None,
          name: str = "learned") -> dict:
    """The base profile's JSON with a fitted `learned` section (see the module docstring).
    `base` None: the profile the sets were measured with (their features' `roofline_us` is
    that profile's; InputError when they disagree)."""
    train = [(str(s), *rows_of(s)) for s in sets]
    held = [(str(s), *rows_of(s)) for s in hold_out]
    used = {str(d.get("settings", {}).get("hardware") or "cpu") for _, d, _ in train + held}
    if base is None:
        if len(used) > 1:
            raise InputError("the program sets were measured with different hardware profiles "
                             f"({', '.join(sorted(used))}); fit one profile's sets at a time, "
                             "or name the base with --hardware")
        base = used.pop()
    Hardware.load(base)  # a bad base profile fails before any fitting
    p = Path(base)
    src = p if p.suffix else HARDWARE_DIR / f"{base}.json"
    profile = json.loads(src.read_text())
    weights = fit([r for _, _, rows in train for r in rows])

    def scored(entries):
        return [{"set": s, "egraph_digest": data.get("egraph_digest"),
                 **evaluate([predict(weights, x) for x, _ in rows], [t for _, t in rows])}
                for s, data, rows in entries]

    profile["name"] = name
    profile["learned"] = {"features": list(FEATURE_NAMES), "weights_us": weights, "trained_on": scored(train),
                          "held_out": scored(held), "base_profile": str(base)}
    return profile
