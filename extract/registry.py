"""The extractors by name, and which are optimal."""

from __future__ import annotations

from .base import Extractor
from .dag_greedy import DagGreedy
from .ilp import ILP
from .tree_greedy import TreeGreedy

EXTRACTORS: dict[str, type[Extractor]] = {cls.name: cls for cls in (TreeGreedy, DagGreedy, ILP)}
DEFAULT = ILP.name


def get_extractor(name: str) -> Extractor:
    try:
        return EXTRACTORS[name]()
    except KeyError:
        raise KeyError(f"unknown extractor {name!r}; choose one of {', '.join(EXTRACTORS)}") from None
