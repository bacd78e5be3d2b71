"""Extraction from serialized e-graphs: cost models, extractors, and a checker.

Works on egraph-serialize JSON (plus eqsat's per-e-class metadata) alone: this package
imports neither egglog nor onnx, so cost-model research can run on saved e-graphs.
"""

from .base import Extraction, Extractor
from .check import ExtractionError, check, dag_cost, tree_cost
from .egraph import EGraph
from .plugins import PluginError
from .registry import EXTRACTORS, extractor_class, get_extractor

__all__ = [
    "EGraph",
    "EXTRACTORS",
    "Extraction",
    "ExtractionError",
    "Extractor",
    "PluginError",
    "check",
    "dag_cost",
    "extractor_class",
    "get_extractor",
    "tree_cost",
]
