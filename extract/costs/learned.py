"""A learned linear cost model: an op's time is its weights times its features
(extract/features.py: the roofline's estimate on the profile, kernels, views, MFLOPs by
kind, MB moved, MB reordered) plus FLOOR_US: a fitted correction of the roofline.

The weights live in a hardware profile's `learned` section, fitted by `eqsat calibrate
--learn` (fit below) to the measured latencies of program sets (`compare-costs
--save-programs`): a program's time is the sum of its ops' times, so the fit is a
non-negative least-squares problem over the programs' feature sums, each row scaled by its
latency so that a small model's programs weigh as much as a large one's (the error fitted
is relative). Non-negative weights and FLOOR_US keep every op's cost finite and > 0 (the
CostModel contract) and make the model monotonic in work.

`evaluate` scores predictions against a set's measurements as compare-costs does (Kendall's
tau over the programs, top-1 regret: how much slower the predicted fastest program is than
the fastest measured); `eqsat calibrate --learn --hold-out` reports it on program sets of
models the fit never saw.
"""

from __future__ import annotations

import math

from ..egraph import EGraph, Node
from ..features import FEATURE_NAMES, is_operator, node_features, roofline_for, vector
from .base import LEAF_COST, CostModel, CostModelError
from .roofline import Hardware

FLOOR_US = 0.01  # every op costs at least this, whatever the fitted weights


class Learned(CostModel):
    """Contract: monotonic (an op's cost is FLOOR_US plus non-negative weights times
    non-negative features); needs a profile with a `learned` section."""

    name = "learned"
    unit = "us"
    compared_by_default = False  # only profiles made by `calibrate --learn` have weights

    def __init__(self, hardware: Hardware | str = "cpu", dims: dict[str, int] | None = None) -> None:
        self.hw = hardware if isinstance(hardware, Hardware) else Hardware.load(hardware)
        self.dims = dict(dims or {})
        self.weights = weights_of(self.hw)

    def costs(self, egraph: EGraph) -> dict[str, float]:
        self._rf = roofline_for(egraph, self.dims, self.hw)
        return super().costs(egraph)

    def node_cost(self, egraph: EGraph, node: Node) -> float:
        if not is_operator(egraph, node.id):
            return LEAF_COST
        rf = getattr(self, "_rf", None) or roofline_for(egraph, self.dims, self.hw)
        v = vector(node_features(egraph, node.id, roofline=rf))
        t = FLOOR_US + sum(w * x for w, x in zip(self.weights, v, strict=True))
        return t if math.isfinite(t) else 1e12


def weights_of(hw: Hardware) -> list[float]:
    """The profile's learned weights in FEATURE_NAMES order; CostModelError saying how to get
    them when it has none or they do not fit this eqsat's features."""
    section = hw.learned
    if not section:
        raise CostModelError(f"cost model learned: hardware profile {hw.name!r} has no learned weights; "
                             "`eqsat calibrate --learn SET.json ... -o PROFILE.json` fits them to program sets "
                             "(compare-costs --save-programs), then pass --hardware PROFILE.json")
    names, weights = section.get("features"), section.get("weights_us")
    if names != list(FEATURE_NAMES) or not isinstance(weights, list) or len(weights) != len(names) \
            or not all(isinstance(w, int | float) and not isinstance(w, bool) and w >= 0 and math.isfinite(w)
                       for w in weights):
        raise CostModelError(f"cost model learned: profile {hw.name!r}: learned.features must be "
                             f"{list(FEATURE_NAMES)} and learned.weights_us as many finite numbers >= 0; "
                             "fit them again with `eqsat calibrate --learn`")
    return [float(w) for w in weights]


def fit(rows: list[tuple[list[float], float]]) -> list[float]:
    """Non-negative weights w minimising sum((w . x / t - 1)^2) over the rows (program
    feature sums x, measured time t in microseconds): relative least squares."""
    import numpy as np
    from scipy.optimize import nnls

    if not rows:
        raise ValueError("no measured programs to fit")
    a = np.array([[xi / t for xi in x] for x, t in rows], dtype=float)
    scale = a.max(axis=0)
    scale[scale == 0] = 1.0  # a feature no program has: weight 0
    w, _ = nnls(a / scale, np.ones(len(rows)))
    return [float(x) for x in w / scale]


def predict(weights: list[float], x: list[float]) -> float:
    """A program's predicted time (us) from its feature sum: what Learned's costs sum to over
    its operator nodes."""
    ops = x[FEATURE_NAMES.index("kernels")] + x[FEATURE_NAMES.index("views")]
    return sum(w * xi for w, xi in zip(weights, x, strict=True)) + FLOOR_US * ops


def evaluate(predicted: list[float], measured: list[float]) -> dict:
    """Kendall's tau between predictions and measurements, top-1 regret (the predicted
    fastest program's measured time over the fastest measured, minus 1) and the mean
    relative error of the predictions."""
    from scipy.stats import kendalltau

    pick = min(range(len(predicted)), key=predicted.__getitem__)
    tau = kendalltau(predicted, measured).statistic if len(set(predicted)) > 1 else float("nan")
    mre = sum(abs(p - m) / m for p, m in zip(predicted, measured, strict=True)) / len(measured)
    return {"programs": len(measured), "tau": float(tau), "top1_regret": measured[pick] / min(measured) - 1.0,
            "mean_relative_error": mre}
