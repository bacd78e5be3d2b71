"""The extractor interface and its result."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from .costs import CostModel
from .egraph import EGraph


@dataclass
class Extraction:
    """One chosen e-node per needed e-class (the classes reachable from the roots)."""

    choice: dict[str, str]  # e-class -> node id
    extractor: str = ""
    tree_cost: float = 0.0
    dag_cost: float = 0.0
    time_s: float = 0.0
    notes: list[str] = field(default_factory=list)  # e.g. "ILP time limit: greedy answer"
    # An exact extractor's proof (the ILP): a proven lower bound on the optimum DAG cost of the
    # problem it solved, and whether the answer is proven optimal ("optimal"), an answer of its
    # own with a gap to the bound ("gap"), or a greedy answer it fell back to ("fallback").
    # None for extractors that prove nothing.
    lower_bound: float | None = None
    status: str | None = None

    @property
    def gap(self) -> float | None:
        """(DAG cost - lower bound) / DAG cost, at least 0; None without a bound."""
        if self.lower_bound is None:
            return None
        if self.dag_cost <= 0:
            return 0.0
        return max(0.0, (self.dag_cost - self.lower_bound) / self.dag_cost)


class Extractor(ABC):
    """Chooses e-nodes for the roots of an e-graph under a cost model.

    Contract: `extract` returns a choice that passes `extract.check` (every root chosen,
    every chosen node's child classes chosen, no cycle), or raises ExtractionError when
    some root has no finite-cost term.
    """

    name: str = ""
    optimal: bool = False  # optimal for DAG cost when it finishes within its limits

    @abstractmethod
    def extract(self, egraph: EGraph, cost: CostModel) -> Extraction: ...
