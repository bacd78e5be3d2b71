"""`eqsat compare-costs`: how well each cost model predicts real latency.

One saturated e-graph; every cost model extracts its program (exact ILP); a sample of other
valid programs comes from the same e-graph (DAG greedy under randomly perturbed node
costs). Every distinct program is decoded and timed under onnxruntime (CPU, one thread, its
own graph optimizations off, side by side in random round orders: eqsat.latency.compare;
median). Per cost model: the predicted cost of its own program, that program's measured
latency, and Kendall's tau between the model's predictions and the measured latencies over
all the programs (1: it ranks them as the hardware does; 0: no better than chance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx import ModelProto

from extract import dag_cost, get_extractor
from extract.costs import COST_MODELS, CostModel, make_cost_model

from . import latency
from .pipeline import Options, saturate
from .target import hardware_profile
from .verify import random_inputs


class _Perturbed(CostModel):
    """Another cost model's costs times exp(sigma * N(0, 1)), per node: a random valid
    extraction that still prefers sensible programs."""

    name = "perturbed"

    def __init__(self, base: dict[str, float], seed: int, sigma: float = 1.0) -> None:
        rng = np.random.default_rng(seed)
        self.table = {k: v * float(np.exp(sigma * rng.standard_normal())) for k, v in base.items()}

    def node_cost(self, egraph, node) -> float:
        return self.table[node.id]


@dataclass
class Record:
    cost_model: str
    predicted: float
    measured_ms: float
    kendall_tau: float | None
    programs: int

    def as_dict(self) -> dict:
        return {"cost_model": self.cost_model, "predicted": self.predicted, "measured_ms": self.measured_ms,
                "kendall_tau": self.kendall_tau, "programs": self.programs}


def compare_costs(model: ModelProto, opts: Options, samples: int = 8, runs: int = 20,
                  progress=None) -> tuple[list[Record], dict]:
    say = progress or (lambda _m: None)
    st = saturate(model, opts, progress, measure=True)
    eg = st.egraph
    models = {name: make_cost_model(name, hardware_profile(opts.hardware), opts.dims) for name in COST_MODELS}
    costs = {name: m.costs(eg) for name, m in models.items()}
    programs: list[dict[str, str]] = []
    own: dict[str, int] = {}

    def add(choice: dict[str, str]) -> int:
        key = frozenset(choice.items())
        for i, p in enumerate(programs):
            if frozenset(p.items()) == key:
                return i
        programs.append(choice)
        return len(programs) - 1

    for name, m in models.items():
        own[name] = add(st.extract(m, "ilp").choice)
    base = costs.get("roofline") or next(iter(costs.values()))
    for seed in range(samples):
        add(get_extractor("dag-greedy").extract(eg, _Perturbed(base, seed)).choice)
    say(f"{len(programs)} distinct programs; timing them")
    dims = dict(opts.dims)
    feeds = random_inputs(model, dims)
    decoded = [st.decode(p) for p in programs]
    measured = latency.compare(decoded, feeds, runs=runs)
    records = []
    predictions: dict[str, list[float]] = {}
    for name in models:
        predicted = predictions[name] = [dag_cost(eg, p, costs[name]) for p in programs]
        records.append(Record(name, predicted[own[name]], measured[own[name]], kendall_tau(predicted, measured),
                              len(programs)))
    info = {"programs": len(programs), "measured_ms": measured, "nodes": [len(m.graph.node) for m in decoded],
            "predicted": predictions, "chosen_by": {name: own[name] for name in models}}
    return records, info


def kendall_tau(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    from scipy.stats import kendalltau

    tau = kendalltau(a, b).statistic
    return None if tau is None or math.isnan(tau) else float(tau)


def as_json(records: list[Record], info: dict) -> dict:
    """What `compare-costs --json` writes: the per-model rows, and every program timed with
    its latency, node count, each model's prediction and the models that chose it."""
    programs = [{"measured_ms": info["measured_ms"][i], "nodes": info["nodes"][i],
                 "predicted": {m: p[i] for m, p in info["predicted"].items()},
                 "chosen_by": [m for m, k in info["chosen_by"].items() if k == i]} for i in range(info["programs"])]
    return {"cost_models": [r.as_dict() for r in records], "programs": programs}


UNITS = {"node-count": "ops", "roofline": "us", "measured": "us"}  # each model's prediction, in its unit


def table(records: list[Record]) -> str:
    """One row per cost model: its predicted cost of its own choice (in its own unit), that
    choice's measured latency, and Kendall's tau over every program timed (n/a: fewer than
    two distinct programs, or all predicted alike)."""
    lines = [f"{'cost model':12s} {'predicted':>16s} {'measured ms':>12s} {'Kendall tau':>12s}"]
    for r in records:
        tau = "n/a" if r.kendall_tau is None else f"{r.kendall_tau:.3f}"
        pred = f"{r.predicted:.3f} {UNITS.get(r.cost_model, '')}".rstrip()
        lines.append(f"{r.cost_model:12s} {pred:>16s} {r.measured_ms:12.3f} {tau:>12s}")
    return "\n".join(lines)
