"""onnxruntime's channel-blocked CPU layout (NCHWc) as the extractor and the cost models see
it: the e-graph's names for its ops (rules/layout.egg declares them). The only module of
`extract` that names them."""

from __future__ import annotations

REORDER_INPUT, REORDER_OUTPUT = "NchwcReorderInput", "NchwcReorderOutput"
REORDERS = frozenset({REORDER_INPUT, REORDER_OUTPUT})  # copies between the layouts
BLOCKED_CONVS = frozenset({"NchwcConv", "NchwcConvPlain"})
UPSAMPLE = "NchwcUpsample"  # Resize by integer factors (linear or nearest)
BLOCKED_POOLS = frozenset({"NchwcMaxPool", "NchwcAveragePool", "NchwcGlobalAveragePool", "NchwcGlobalMaxPool",
                           UPSAMPLE})  # per-channel ops on blocked values
WINDOW_POOLS = frozenset({"NchwcMaxPool", "NchwcAveragePool"})  # blocked pools with a window
GLOBAL_AVERAGE_POOL = "NchwcGlobalAveragePool"
NCHWC_OPS = REORDERS | BLOCKED_CONVS | BLOCKED_POOLS  # every op that reads or writes the blocked layout


def is_blocked(op: str) -> bool:
    """Whether an e-node's op reads or writes the blocked layout."""
    return op in NCHWC_OPS
