"""The extractors by name, and which are optimal."""

from __future__ import annotations

import inspect

from . import plugins
from .base import Extractor
from .dag_greedy import DagGreedy
from .ilp import ILP
from .ilp_fixed_layouts import ILPFixedLayouts
from .tree_greedy import TreeGreedy

# the shipped ones; installed packages add theirs under eqsat.extractors (extract/plugins.py)
EXTRACTORS: dict[str, type[Extractor]] = {cls.name: cls for cls in (TreeGreedy, DagGreedy, ILP, ILPFixedLayouts)}
DEFAULT = ILP.name
# names of earlier releases: ilp-layouts chose the layouts with everything else, as ilp now does
ALIASES = {"ilp-layouts": ILP.name}


def extractor_class(name: str) -> type[Extractor]:
    """The extractor class of that name: registered, or from an installed plugin.
    KeyError lists every name there is; PluginError says which package failed."""
    return plugins.find(plugins.EXTRACTOR_GROUP, ALIASES.get(name, name), Extractor, EXTRACTORS, "extractor")


def get_extractor(name: str, time_limit: float | None = None) -> Extractor:
    """An extractor by name; `time_limit` (seconds) goes to those whose constructor takes
    one (the ILP's search)."""
    cls = extractor_class(name)
    if time_limit is not None and "time_limit" in inspect.signature(cls).parameters:
        return cls(time_limit=time_limit)
    return cls()
