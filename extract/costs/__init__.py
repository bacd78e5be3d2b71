"""Cost models for extraction."""

from .base import CostModel
from .node_count import NodeCount

COST_MODELS: dict[str, type[CostModel]] = {NodeCount.name: NodeCount}

__all__ = ["COST_MODELS", "CostModel", "NodeCount"]
