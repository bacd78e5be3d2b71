"""The planner's entry points for callers outside the package (the Python API, `eqsat plan`,
`eqsat optimize --plan`): a model in, a checked plan out.

Contracts: `plan(model)` and `checked_plan(model)` return only a plan that passed
`check_plan` (no two live buffers overlap, offsets aligned, everything inside the arena);
a symbolic dimension that `dims` leaves unbound is a UsageError, which `check_plan_dims`
raises before any work (before optimizing, with `optimize --plan`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onnx import ModelProto

    from eqsat.plan.planner import Plan


def plan(model: ModelProto | str | os.PathLike, *, dims: dict[str, int] | None = None,
         alignment: int = 64) -> Plan:
    """The checked memory plan of `model` (an onnx.ModelProto or a path)."""
    from onnx import ModelProto

    from eqsat.plan.check import check_plan
    from eqsat.plan.planner import plan_model

    if not isinstance(model, ModelProto):
        from eqsat.io.modelio import read_model

        model = read_model(model, check=True)[0]
    p = plan_model(model, dict(dims or {}), alignment)
    check_plan(p)
    return p


def checked_plan(model: ModelProto, dims: dict[str, int] | None = None, alignment: int = 64) -> dict[str, Any]:
    """`plan(model)` as the plan file's dict."""
    return plan(model, dims=dims, alignment=alignment).to_dict()


def check_plan_dims(model: ModelProto, dims: dict[str, int]) -> None:
    """Raise UsageError now if planning `model` would need a dimension `dims` lacks."""
    from eqsat.plan.sizes import input_dims

    input_dims(model, dims)


def summary(d: dict[str, Any]) -> dict[str, Any]:
    """The headline figures of a plan dict (for a report)."""
    keys = ("arena_bytes", "lower_bound_bytes", "model_order_lower_bound_bytes", "no_reuse_bytes",
            "inplace_saved_bytes", "heuristic", "order_heuristic", "alignment", "dims")
    return {k: d[k] for k in keys}
