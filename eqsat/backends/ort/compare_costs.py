"""`eqsat compare-costs`: how well each cost model predicts real latency.

One saturated e-graph; every cost model extracts its program (the ILP unless another
extractor is named); a sample of other
valid programs comes from the same e-graph (DAG greedy under randomly perturbed node
costs). Every distinct program is decoded and timed under onnxruntime (CPU, one thread, its
own graph optimizations off, medians): in child processes of a few programs each beside the
first cost model's own, in random round orders, and scaled through it
(eqsat.backends.ort.latency.compare_to_first), since many sessions in one process evict each
other's weights between runs and can rank a slower program as faster. Per cost model: the
predicted cost of its own program, that program's measured latency, and Kendall's tau
between the model's predictions and the measured latencies over all the programs (1: it
ranks them as the hardware does; 0: no better than chance), with
its one-sided p-value (how often chance alone ranks as well) and, from MIN_INTERVAL programs
on, a 95 % percentile bootstrap interval over the programs (resampled with replacement; with
fewer it says nothing: a perfectly ranked sample resamples to [1, 1] at any size). With ten
programs the interval is wide, and one that holds 0 does not tell the model from chance.
The random programs perturb the roofline's costs whichever models are compared, so runs
with different `--cost-model` lists time the same sample. The main graph only: the bodies of
If and Loop are timed as the input has them (`eqsat optimize` optimizes them separately).
The input is run once under onnxruntime before any saturation: one it cannot run (an op of
a domain it does not know, ...) is an InputError (exit 2); a program eqsat extracted that it
cannot run is an OptimizeError naming the program (exit 1).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from onnx import ModelProto

from eqsat.backends.ort import latency
from eqsat.core.modelcheck import check_model
from eqsat.core.pipeline import Options, cost_model, saturate
from eqsat.environment import check_environment
from eqsat.errors import EqsatError, InputError, OptimizeError, extraction_errors
from eqsat.extract import dag_cost, get_extractor
from eqsat.extract.costs import COST_MODELS, CostModel
from eqsat.extract.registry import DEFAULT as EXTRACTOR_DEFAULT
from eqsat.verification import random_inputs, run
from eqsat.verification.isolate import probe


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
    tau_interval: tuple[float, float] | None = None  # 95 %, bootstrap over the programs
    extractor: str = EXTRACTOR_DEFAULT
    p_value: float | None = None  # of tau (scipy.stats.kendalltau, one-sided: agreement)
    unit: str = ""  # the cost model's

    def as_dict(self) -> dict:
        return {"cost_model": self.cost_model, "extractor": self.extractor, "predicted": self.predicted,
                "measured_ms": self.measured_ms, "kendall_tau": self.kendall_tau,
                "kendall_tau_95": list(self.tau_interval) if self.tau_interval else None, "kendall_p": self.p_value,
                "programs": self.programs}


def compare_costs(model: ModelProto, opts: Options, samples: int = 8, runs: int = 20, progress=None,
                  cost_models: list[str] | None = None) -> tuple[list[Record], dict]:
    """`cost_models`: the names to compare (default every registered one whose class is
    `compared_by_default`, all but file-costs: the shipped models, any a script added to
    COST_MODELS, and installed plugins this process already loaded by name); each extracts its program with
    `opts.extractor`."""
    say = progress or (lambda _m: None)
    check_environment()
    check_model(model)
    # file-costs reads the costs a file carries; a freshly saturated e-graph carries egglog's placeholder 1.0s
    names = list(dict.fromkeys(cost_models or [n for n, m in COST_MODELS.items() if m.compared_by_default]))
    models = {name: cost_model(dataclasses.replace(opts, cost_model=name)) for name in names}  # bad names fail now
    dims = dict(opts.dims)
    feeds = random_inputs(model, dims)
    if crash := probe([model], feeds, ["the model"]):  # a crash would end eqsat: in a child first
        raise InputError(f"compare-costs times programs under onnxruntime: {crash}")
    try:  # before any work: a model onnxruntime cannot run has no programs to time
        run(model, feeds, optimize=False)
    except EqsatError:
        raise
    except Exception as e:  # noqa: BLE001 - onnxruntime's errors are its own classes
        raise InputError(f"compare-costs times programs under onnxruntime, which cannot run this model: "
                         f"{_first_line(e)}") from None
    st = saturate(model, opts, progress, measure=True)
    eg = st.egraph
    with extraction_errors("compare-costs", *models.values()):
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
        own[name] = add(st.extract(m).choice)
    base = cost_model(dataclasses.replace(opts, cost_model="roofline")).costs(eg)  # the same sample for any list
    for seed in range(samples):
        add(get_extractor("dag-greedy").extract(eg, _Perturbed(base, seed)).choice)
    say(f"{len(programs)} distinct programs; timing them")
    decoded = [st.decode(p) for p in programs]
    labels = [_program_label(i, len(programs), own) for i in range(len(programs))]
    if crash := probe(decoded, feeds, labels):
        raise OptimizeError(f"compare-costs: {crash}")
    try:
        measured = latency.compare_to_first(decoded, feeds, runs=runs)
    except EqsatError:
        raise
    except Exception as e:  # noqa: BLE001 - onnxruntime's errors are its own classes
        raise _unrunnable(decoded, feeds, own, e) from None
    records = []
    predictions: dict[str, list[float]] = {}
    for name in models:
        predicted = predictions[name] = [dag_cost(eg, p, costs[name]) for p in programs]
        records.append(Record(name, predicted[own[name]], measured[own[name]], kendall_tau(predicted, measured),
                              len(programs), tau_interval(predicted, measured), opts.extractor,
                              kendall_p(predicted, measured), models[name].unit))
    info = {"programs": len(programs), "measured_ms": measured, "nodes": [len(m.graph.node) for m in decoded],
            "predicted": predictions, "chosen_by": {name: own[name] for name in models}}
    return records, info


def _unrunnable(decoded: list[ModelProto], feeds: dict, own: dict[str, int], error: Exception) -> OptimizeError:
    """The OptimizeError for programs eqsat extracted that onnxruntime failed on (`error`,
    timing them together): it names the first that fails alone, and who chose it."""
    failing = None
    for i, m in enumerate(decoded):
        try:
            latency.session(m, optimize=False).run(None, feeds)
        except Exception as e:  # noqa: BLE001 - this one
            failing, error = i, e
            break
    what = "the programs timed together" if failing is None else _program_label(failing, len(decoded), own)
    return OptimizeError(f"compare-costs: onnxruntime cannot run {what}: {_first_line(error)}")


def _program_label(i: int, n: int, own: dict[str, int]) -> str:
    """"program I of N (the one MODEL chose)", or "(a random extraction)"."""
    by = [name for name, k in own.items() if k == i]
    chose = f"the one {' and '.join(by)} chose" if by else "a random extraction"
    return f"program {i + 1} of {n} ({chose})"


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


MIN_INTERVAL = 8  # programs: below, a bootstrap interval of tau says nothing


def _kendall(a, b):
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return None
    from scipy.stats import kendalltau

    r = kendalltau(a, b, alternative="greater")  # the p-value of agreement: ranking backwards is no skill
    return None if r.statistic is None or math.isnan(r.statistic) else r


def kendall_tau(a: list[float], b: list[float]) -> float | None:
    r = _kendall(a, b)
    return None if r is None else min(1.0, max(-1.0, round(float(r.statistic), 12)))


def kendall_p(a: list[float], b: list[float]) -> float | None:
    """The one-sided p-value of tau: the chance that predictions unrelated to the latencies
    agree with them at least this well (a model that ranks the programs backwards gets
    p near 1, not near 0)."""
    r = _kendall(a, b)
    return None if r is None or math.isnan(r.pvalue) else float(r.pvalue)


def tau_interval(a: list[float], b: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """95 % percentile bootstrap interval of Kendall's tau: the programs resampled with
    replacement `n` times (resamples whose tau is undefined are left out); None where tau
    itself is, with fewer than MIN_INTERVAL programs, or where most resamples have none."""
    if len(a) < MIN_INTERVAL or kendall_tau(a, b) is None:
        return None
    rng = np.random.default_rng(seed)
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    taus = [t for t in (kendall_tau(x[i], y[i]) for i in rng.integers(0, len(x), (n, len(x)))) if t is not None]
    if len(taus) < n // 2:
        return None
    lo, hi = np.percentile(taus, [2.5, 97.5])
    return float(lo), float(hi)


def as_json(records: list[Record], info: dict) -> dict:
    """What `compare-costs --json` writes: the per-model rows, and every program timed with
    its latency, node count, each model's prediction and the models that chose it."""
    programs = [{"measured_ms": info["measured_ms"][i], "nodes": info["nodes"][i],
                 "predicted": {m: p[i] for m, p in info["predicted"].items()},
                 "chosen_by": [m for m, k in info["chosen_by"].items() if k == i]} for i in range(info["programs"])]
    return {"cost_models": [r.as_dict() for r in records], "programs": programs}


def table(records: list[Record]) -> str:
    """One row per cost model: its predicted cost of its own choice (in its own unit), that
    choice's measured latency, and Kendall's tau over every program timed (n/a: fewer than
    two distinct programs, or all predicted alike) with its 95 % interval (from MIN_INTERVAL
    programs on) and p-value."""
    lines = [f"{'cost model':12s} {'predicted':>16s} {'measured ms':>12s} {'Kendall tau [95 %]':>22s} {'p':>7s}"]
    for r in records:
        tau = "n/a" if r.kendall_tau is None else f"{r.kendall_tau:.3f}"
        if r.tau_interval:
            tau += f" [{r.tau_interval[0]:.2f}, {r.tau_interval[1]:.2f}]"
        p = "" if r.p_value is None else f"{r.p_value:.2g}"
        pred = f"{r.predicted:.3f} {r.unit}".rstrip()
        lines.append(f"{r.cost_model:12s} {pred:>16s} {r.measured_ms:12.3f} {tau:>22s} {p:>7s}")
    return "\n".join(lines)
