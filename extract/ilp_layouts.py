"""The ILP over every layout choice (`--extractor ilp-layouts`).

Where the e-graph holds values in both layouts (NCHW and onnxruntime's blocked NCHWc), it
solves the program with each value's layout fixed from the greedy answer first (the `ilp`
extractor's answer), then the program over every layout in the time left, and returns that
answer where it is proven optimal, else the better of the two with status `gap` and the
bound over every layout choice (extract/ilp.py, ILP._joint). Elsewhere it is the `ilp`
extractor. It is not the default: on 52 CNN e-graphs it proved the fixed layouts optimal
on 44 and changed no measured latency on the others, at several times `ilp`'s time
(benchmarks/results/layout-ilp.md).
"""

from __future__ import annotations

from .ilp import ILP


class ILPLayouts(ILP):
    name = "ilp-layouts"
    optimal = True

    def __init__(self, time_limit: float = 60.0, bound_work: bool = True) -> None:
        super().__init__(time_limit, fix_layouts=False, bound_work=bound_work)
