"""Memory planning: where every intermediate tensor of a model lives in one arena.

The last stage of the pipeline: it plans the (optimized) model. Like a hotel front desk
assigning rooms, it works out when each tensor checks in and out (its lifetime in an
execution order) and gives tensors whose stays do not overlap the same bytes.

1. `graph_from_model`: the execution order (the model's node order), each intermediate's
   size from shape inference with symbolic dimensions bound (`dims`), its lifetime. Graph
   inputs and initializers are not planned: the caller owns them.
2. `eqsat.plan.order`: memory-aware topological orders; the one with the lowest peak of live
   bytes is kept, never worse than the model's order.
3. `eqsat.plan.inplace`: element-wise ops write over an input that dies at them; views
   (Reshape, Squeeze, Unsqueeze, Flatten, Identity) share their input's buffer.
4. `eqsat.plan.arena`: offsets in one arena (greedy by size with best fit, by breadth, by
   start, by conflict); the smallest arena wins.
5. `check_plan`: no two live buffers overlap, offsets aligned, everything inside the arena.
6. `execute_plan`: the proof by execution, node by node through one numpy byte arena,
   compared with onnxruntime.

    from eqsat.plan import plan_model, check_plan, execute_plan
    plan = plan_model(model, dims={"batch": 1, "sequence": 128})
    check_plan(plan)
    print(plan.arena_bytes, plan.lower_bound_bytes, execute_plan(model, plan).status)
    json.dump(plan.to_dict(), f)   # the plan file
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for static tools; at run time each name loads on first use
    from eqsat.plan.check import check_plan, check_tensors
    from eqsat.plan.errors import PlanError
    from eqsat.plan.execute import Execution, execute_plan
    from eqsat.plan.graph import Graph, Node, TensorInfo, graph_from_model
    from eqsat.plan.planner import Plan, PlannedTensor, plan_graph, plan_model

# Loaded on first use (PEP 562), so that `eqsat --help` and the plan subcommand's parser do
# not import numpy and onnx: name -> the submodule that defines it.
_EXPORTS = {
    "check_plan": "check", "check_tensors": "check",
    "PlanError": "errors",
    "Execution": "execute", "execute_plan": "execute",
    "Graph": "graph", "Node": "graph", "TensorInfo": "graph", "graph_from_model": "graph",
    "Plan": "planner", "PlannedTensor": "planner", "plan_graph": "planner", "plan_model": "planner",
}

__all__ = [
    "Execution", "Graph", "Node", "Plan", "PlanError", "PlannedTensor", "TensorInfo", "check_plan",
    "check_tensors", "execute_plan", "graph_from_model", "plan_graph", "plan_model",
]


def __getattr__(name: str):
    """An exported name, imported from its submodule on first use and kept."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names with the exported ones not loaded yet."""
    return sorted(set(globals()) | set(_EXPORTS))


class _CallablePackage(types.ModuleType):
    """`eqsat.plan(model, dims=...)` is eqsat.plan.entry.plan: the package is the public function's
    name too (a function named `plan` in eqsat would be replaced by this package whenever one
    of its submodules is imported)."""

    def __call__(self, model, *, dims=None, alignment: int = 64):
        from eqsat.plan.entry import plan

        return plan(model, dims=dims, alignment=alignment)


sys.modules[__name__].__class__ = _CallablePackage
