"""The extractors by name, and which are optimal."""

from __future__ import annotations

from .base import Extractor
from .dag_greedy import DagGreedy
from .ilp import ILP
from .tree_greedy import TreeGreedy

EXTRACTORS: dict[str, type[Extractor]] = {cls.name: cls for cls in (TreeGreedy, DagGreedy, ILP)}
DEFAULT = ILP.name


def get_extractor(name: str, time_limit: float | None = None) -> Extractor:
    """An extractor by name; `time_limit` (seconds) bounds those that search (the ILP)."""
    try:
        cls = EXTRACTORS[name]
    except KeyError:
        raise KeyError(f"unknown extractor {name!r}; choose one of {', '.join(EXTRACTORS)}") from None
    return cls(time_limit) if time_limit is not None and cls is ILP else cls()
