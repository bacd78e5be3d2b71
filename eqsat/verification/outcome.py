"""What a verification concludes (`Verification`) and the tolerances it judges outputs by
(`tolerance`, `_scale`): eqsat.verification re-exports them; eqsat.verification.widen reads
them here, so that it imports nothing of the package that calls it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Verification's tolerance where the user gives none, by output element type: rewrites
# reorder arithmetic and so move the last bits, and onnxruntime's CPU provider runs many
# float16 ops in float32 with casts placed by the graph's structure (a float16 value has
# about three decimal digits). No bfloat16 entry: onnxruntime's CPU provider runs no bfloat16
# Add, so such a model is verified as float32 copies (eqsat.verification.widen), with float16's
# tolerance for its rounded runs.
# float64 outputs are held to double precision (reordering moves a double by about 1e-15
# of its magnitude): with float32's tolerance a rewrite that ran a double computation in
# float32 passed.
DEFAULT_TOLERANCE = (1e-3, 1e-4)  # (rtol, atol)
TOLERANCE = {"float16": (1e-2, 1e-3), "float64": (1e-9, 1e-12)}


def tolerance(dtype) -> tuple[float, float]:
    """(rtol, atol) for outputs of this element type when the user gives none."""
    return TOLERANCE.get(np.dtype(dtype).name, DEFAULT_TOLERANCE)


def _scale(e: np.ndarray) -> float:
    """The default absolute tolerance's factor for an output: its largest finite magnitude,
    where that is below 1, but not below the square root of the type's smallest normal
    (about 1e-19 for float32: smaller outputs are the remains of underflow, which rounding
    moves by more than their size; a MobileViT with random weights ends near 1e-40). An
    output whose values are all about 1e-9 (a network with random weights) passed anything
    within 1e-4 of them: a bias of another layer's passed there."""
    if e.dtype.kind not in "fc" or e.size == 0:
        return 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.abs(e[np.isfinite(e)])
    top = float(m.max()) if m.size else 1.0
    return min(1.0, max(top, float(np.sqrt(np.finfo(e.dtype).tiny))))


@dataclass
class Verification:
    status: str  # passed | failed | not possible
    detail: str = ""
    runs: int = 0
    inputs: str = ""  # what the integer and overridable inputs were fed (eqsat.verification.feeds)
    not_verified: str = ""  # what the comparison did not cover (nodes fed stand-in values)
    edge_cases: str = ""  # the runs on special values and empty sizes (`_edge_runs`), and those the original refused
    # failed only on outputs of a QDQ model that lie farther from the original than onnxruntime's
    # own optimization of it moves them (QdqAllowance): a program with fewer requantizing
    # fusions may pass (eqsat.api.finish tries them)
    requantized: bool = False

    def as_dict(self) -> dict:
        out = {"status": self.status, "detail": self.detail, "runs": self.runs}
        if self.inputs:
            out["inputs"] = self.inputs
        if self.not_verified:
            out["not_verified"] = self.not_verified
        if self.edge_cases:
            out["edge_cases"] = self.edge_cases
        return out
