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
