"""The ILP with each value's layout fixed from the greedy answer (`--extractor ilp-fixed-layouts`).

Where the e-graph holds values in both layouts (NCHW and onnxruntime's blocked NCHWc), it
fixes each value's layout from the greedy answer and solves only that program (extract/ilp.py,
fix_layouts): never worse than the greedy answer, optimal for that layout choice and not
over every layout, so it is not registered as optimal, and its notes say which layouts it
fixed. Elsewhere it is the `ilp` extractor, which chooses the layouts with everything else.
"""

from __future__ import annotations

from .ilp import ILP


class ILPFixedLayouts(ILP):
    name = "ilp-fixed-layouts"
    optimal = False

    def __init__(self, time_limit: float = 60.0, bound_work: bool = True) -> None:
        super().__init__(time_limit, fix_layouts=True, bound_work=bound_work)
