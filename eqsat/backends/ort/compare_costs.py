"""`eqsat compare-costs`: how well each cost model predicts real latency.

One saturated e-graph; every cost model extracts its program (the ILP unless another
extractor is named); at least `samples` other distinct valid programs come from the same
e-graph, not centred on any one model (eqsat.backends.ort.program_sample: uniform random
extractions, random walks from the models' optima, mutations, perturbed roofline; seeded),
or from a program set saved before (eqsat.backends.ort.program_set, refused when made on
another e-graph). Every program is decoded and timed under onnxruntime (CPU, one thread,
its own graph optimizations off) over `runs` interleaved rounds, in child processes of a
few programs each beside the first program, scaled through it
(eqsat.backends.ort.latency.compare_to_first_samples), since fifty sessions in one process
evict each other's weights between runs. Every sample is kept, with each program's 95 %
order-statistic interval of the median, and the first program is timed twice as separate
entries: the ratio of the two (with its bootstrap interval) is the noise floor. Per cost
model: the predicted cost of its own program, that program's measured latency, Kendall's
tau between predictions and medians over all the programs with its one-sided p-value and,
from MIN_INTERVAL programs on, a 95 % percentile bootstrap interval; top-1 and top-5 regret
(eqsat.backends.ort.compare_stats.top_k_regret) and, for models that predict time, the
mean absolute error of the predicted time. The main graph only: the bodies of
If and Loop are timed as the input has them (`eqsat optimize` optimizes them separately).
The input is run once under onnxruntime before any saturation: one it cannot run (an op of
a domain it does not know, ...) is an InputError (exit 2); a program eqsat extracted that it
cannot run is an OptimizeError naming the program (exit 1).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

import numpy as np
from onnx import ModelProto

from eqsat.backends.ort import latency, program_sample, provenance
from eqsat.backends.ort import program_set as program_sets
from eqsat.backends.ort.compare_stats import (
    mean_abs_error,
    median_interval,
    near_best,
    ratio_interval,
    top_k_regret,
)
from eqsat.core.modelcheck import check_model
from eqsat.core.pipeline import Options, cost_model, saturate
from eqsat.environment import check_environment
from eqsat.errors import EqsatError, InputError, OptimizeError, UsageError, extraction_errors
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
    measured_ms: float | None  # its own program's; None where a stored set lacks it (--no-time)
    kendall_tau: float | None
    programs: int
    tau_interval: tuple[float, float] | None = None  # 95 %, bootstrap over the programs
    extractor: str = EXTRACTOR_DEFAULT
    p_value: float | None = None  # of tau (scipy.stats.kendalltau, one-sided: agreement)
    unit: str = ""  # the cost model's
    top1_regret: float | None = None  # its lowest-predicted program's latency / the fastest's - 1
    top5_regret: float | None = None  # the fastest of its 5 lowest-predicted / the fastest - 1
    mae_ms: float | None = None  # mean |predicted - measured| over the programs, models that predict time
    near_tau: float | None = None  # Kendall's tau among the programs within NEAR_BEST of the fastest
    near_programs: int = 0  # how many those are

    def as_dict(self) -> dict:
        return {"cost_model": self.cost_model, "extractor": self.extractor, "predicted": self.predicted,
                "unit": self.unit, "measured_ms": self.measured_ms, "kendall_tau": self.kendall_tau,
                "kendall_tau_95": list(self.tau_interval) if self.tau_interval else None, "kendall_p": self.p_value,
                "top1_regret": self.top1_regret, "top5_regret": self.top5_regret, "mae_ms": self.mae_ms,
                "programs": self.programs, "kendall_tau_near": self.near_tau, "near_programs": self.near_programs}


def compare_costs(model: ModelProto, opts: Options, samples: int = 8, runs: int = 30, progress=None,
                  cost_models: list[str] | None = None, seed: int = 0, program_set: dict | None = None,
                  timed: bool = True, program_set_path: str = "", clock: str = "cpu",
                  repeats: int = 1) -> tuple[list[Record], dict]:
    """`cost_models`: the names to compare (default every registered one whose class is
    `compared_by_default`, all but file-costs: the shipped models, any a script added to
    COST_MODELS, and installed plugins); each extracts its program with `opts.extractor`.
    `program_set` (program_set.read): time those programs (and each model's own) instead of
    sampling, or with `timed` False score the models against the set's stored samples.
    `clock`: what a run's time is (eqsat.backends.ort.latency.CLOCKS): "cpu", the process's
    CPU time (the default: on a machine other work shares, wall time also counts the time
    others hold the core), or "wall". `repeats`: time every program that many times over in
    fresh processes (_time), pooling the samples."""
    say = progress or (lambda _m: None)
    check_environment()
    check_model(model)
    models = {name: cost_model(dataclasses.replace(opts, cost_model=name))  # bad names fail now
              for name in default_names(cost_models)}
    feeds = random_inputs(model, dict(opts.dims))
    _check_input_runs(model, feeds)
    st = saturate(model, opts, progress, measure=True)
    eg = st.egraph
    with extraction_errors("compare-costs", *models.values()):
        costs = {name: m.costs(eg) for name, m in models.items()}
        own_choice = {name: st.extract(m).choice for name, m in models.items()}
        note = ""
        if program_set is None:
            base = costs.get("roofline") or cost_model(dataclasses.replace(opts, cost_model="roofline")).costs(eg)
            programs, kinds, note = _sample(eg, costs, base, own_choice, samples, seed)
        else:
            programs, kinds = program_sets.programs_of(program_set, eg, program_set_path)
    own = _own(eg, programs, kinds, own_choice, add=timed)
    say(f"{len(programs)} distinct programs" + ("; timing them" if timed else ""))
    if not timed:
        records, info = _stored_scores(eg, models, costs, own_choice, programs, kinds, own, program_set,
                                       program_set_path, opts.extractor, note)
    else:
        times, nodes, noise = _time(st, programs, feeds, runs, own, clock, repeats)
        records, info = _records(eg, models, costs, own_choice, programs, kinds, own, times, nodes, noise, note,
                                 opts.extractor)
    info["egraph_json"] = st.data  # what --save-egraph writes
    return records, info


def score_saved(eg, opts: Options, cost_models: list[str] | None, program_set: dict,
                program_set_path: str = "") -> tuple[list[Record], dict]:
    """compare-costs on a saved e-graph (`--save-egraph` of optimize or compare-costs): each
    cost model prices the set's programs and chooses its own with `opts.extractor`, scored
    against the set's stored samples. Nothing is decoded or timed: a saved e-graph holds no
    weights. A default-listed model that cannot price this e-graph (measured, where it was
    saved without op times) is left out and named in the note; a named one is an error."""
    from eqsat.core.pipeline import run_extractor
    from eqsat.extract.costs import CostModelError

    check_environment()
    names, skipped = default_names(cost_models), []
    models = {name: cost_model(dataclasses.replace(opts, cost_model=name)) for name in names}
    costs = {}
    with extraction_errors("compare-costs", *models.values()):
        for name, m in list(models.items()):
            try:
                costs[name] = m.costs(eg)
            except CostModelError:
                if cost_models:
                    raise
                skipped.append(name)
                del models[name]
        own_choice = {name: run_extractor(eg, opts.extractor, m).choice for name, m in models.items()}
    programs, kinds = program_sets.programs_of(program_set, eg, program_set_path)
    own = _own(eg, programs, kinds, own_choice, add=False)
    note = f"left out (they cannot price this saved e-graph): {', '.join(skipped)}" if skipped else ""
    return _stored_scores(eg, models, costs, own_choice, programs, kinds, own, program_set, program_set_path,
                          opts.extractor, note)


def _stored_scores(eg, models, costs, own_choice, programs, kinds, own, program_set: dict, path: str,
                   extractor: str, note: str) -> tuple[list[Record], dict]:
    """The records against a program set's stored samples (--no-time)."""
    times = [list(p.get("samples_ms") or []) for p in program_set["programs"]]
    nodes, noise = [p.get("nodes") for p in program_set["programs"]], program_set.get("noise_floor")
    if not all(times):
        raise InputError(f"{path}: --no-time scores against stored samples: some programs have none")
    return _records(eg, models, costs, own_choice, programs, kinds, own, times, nodes, noise, note, extractor)


def _records(eg, models, costs, own_choice, programs, kinds, own, times, nodes, noise, note,
             extractor: str) -> tuple[list[Record], dict]:
    measured = [statistics.median(t) for t in times]
    records, predictions = _score(eg, models, costs, own_choice, programs, measured, own, extractor)
    info = {"programs": len(programs), "measured_ms": measured, "nodes": nodes, "predicted": predictions,
            "chosen_by": own, "samples_ms": times, "kinds": kinds, "choices": programs, "noise_floor": noise,
            "note": note, "egraph": eg}
    return records, info


def default_names(given: list[str] | None) -> list[str]:
    """The cost models to compare: those given, else every registered or installed one whose
    class is `compared_by_default` (file-costs reads the costs a file carries; a freshly
    saturated e-graph carries egglog's placeholder 1.0s)."""
    if given:
        return list(dict.fromkeys(given))
    from eqsat.extract import plugins

    for name in plugins.names(plugins.COST_MODEL_GROUP):  # load the installed ones, so their flag is read
        if name not in COST_MODELS:
            try:
                plugins.load(plugins.COST_MODEL_GROUP, name, CostModel, COST_MODELS)
            except plugins.PluginError as e:
                raise UsageError(f"compare-costs compares every installed cost model by default: {e}; "
                                 "name the models to compare with --cost-model") from None
    return [n for n, m in COST_MODELS.items() if m.compared_by_default]


def _check_input_runs(model: ModelProto, feeds: dict) -> None:
    """InputError unless onnxruntime runs the input (a crash found in a child first)."""
    if crash := probe([model], feeds, ["the model"]):  # a crash would end eqsat: in a child first
        raise InputError(f"compare-costs times programs under onnxruntime: {crash}")
    try:  # before any work: a model onnxruntime cannot run has no programs to time
        run(model, feeds, optimize=False)
    except EqsatError:
        raise
    except Exception as e:  # noqa: BLE001 - onnxruntime's errors are its own classes
        raise InputError(f"compare-costs times programs under onnxruntime, which cannot run this model: "
                         f"{_first_line(e)}") from None


def _sample(eg, costs: dict, base: dict, own_choice: dict, samples: int,
            seed: int) -> tuple[list[dict[str, str]], list[str], str]:
    ok = program_sample.allowed(eg, [*costs.values(), base])

    def perturbed(s: int) -> dict[str, str]:
        return get_extractor("dag-greedy").extract(eg, _Perturbed(base, s)).choice

    return program_sample.sample(eg, ok, samples, seed, list(own_choice.values()), perturbed)


def _own(eg, programs: list[dict[str, str]], kinds: list[str], own_choice: dict, add: bool) -> dict[str, int]:
    """Cost model -> the index of its own program among `programs`, appended (kind `chosen`)
    when missing and `add`; left out when missing and not `add`."""
    index = {frozenset(p.items()): i for i, p in enumerate(programs)}
    own = {}
    for name, choice in own_choice.items():
        key = frozenset(program_sample.program(eg, choice).items())
        if key not in index and add:
            index[key] = len(programs)
            programs.append(dict(key))
            kinds.append("chosen")
        if key in index:
            own[name] = index[key]
    return own


def _time(st, programs: list[dict[str, str]], feeds: dict, runs: int,
          own: dict[str, int], clock: str = "cpu", repeats: int = 1) -> tuple[list[list[float]], list[int], dict]:
    """Every run of every program (ms), each program's node count, and the noise floor: the
    first program timed again as a separate, last entry, and the ratio of its median to the
    first's. With `repeats` > 1 every program is timed that many times over, each time in
    fresh child processes with the others grouped in another (seeded) order, its samples
    pooled; the noise floor then also holds each repeat's median of each program and the
    repeat ceiling (`repeat_ceiling`)."""
    import random

    decoded = [st.decode(p) for p in programs]
    labels = [_program_label(i, len(programs), own) for i in range(len(programs))]
    if crash := probe(decoded, feeds, labels):
        raise OptimizeError(f"compare-costs: {crash}")
    times: list[list[float]] = [[] for _ in decoded]
    again: list[float] = []
    per_repeat: list[list[float]] = [[] for _ in decoded]
    try:
        for m in decoded:  # here first, where the error names the program (the timing children's do not)
            latency.session(m, optimize=False).run(None, feeds)
        for r in range(repeats):
            order = list(range(1, len(decoded)))
            if r:
                random.Random(r).shuffle(order)
            order = [0, *order]
            got = latency.compare_to_first_samples([*(decoded[i] for i in order), decoded[0]], feeds, runs=runs,
                                                   clock=clock)
            again += got.pop()
            for i, t in zip(order, got, strict=True):
                times[i] += t
                per_repeat[i].append(statistics.median(t))
    except EqsatError:
        raise
    except Exception as e:  # noqa: BLE001 - onnxruntime's errors are its own classes
        raise _unrunnable(decoded, feeds, own, e) from None
    noise = {"program": 1, "samples_ms": again, "ratio": statistics.median(again) / statistics.median(times[0]),
             "ratio_95": ratio_interval(again, times[0]), "clock": clock, "repeats": repeats}
    if repeats > 1:
        noise["repeat_medians_ms"] = per_repeat
        noise["repeat_ceiling"] = repeat_ceiling(per_repeat)
    return times, [len(m.graph.node) for m in decoded], noise


def repeat_ceiling(per_repeat: list[list[float]]) -> dict:
    """How well the measurement orders programs against itself: Kendall's tau between the
    medians of a program's even-numbered repeats and of its odd-numbered ones, over all
    programs and among the near-best (compare_stats.near_best of the pooled medians). A
    cost model's tau against these measurements is not expected above it: where it is low the
    programs differ by less than the measurement repeats."""
    a = [statistics.median(r[0::2]) for r in per_repeat]
    b = [statistics.median(r[1::2]) for r in per_repeat]
    near = near_best([statistics.median(r) for r in per_repeat])
    return {"tau": kendall_tau(a, b), "tau_near": kendall_tau([a[i] for i in near], [b[i] for i in near]),
            "near": len(near)}


def _score(eg, models: dict, costs: dict, own_choice: dict, programs: list[dict[str, str]], measured: list[float],
           own: dict[str, int], extractor: str) -> tuple[list[Record], dict[str, list[float]]]:
    records, predictions = [], {}
    near = near_best(measured)
    for name, m in models.items():
        predicted = predictions[name] = [dag_cost(eg, p, costs[name]) for p in programs]
        i = own.get(name)
        records.append(Record(name, dag_cost(eg, own_choice[name], costs[name]), None if i is None else measured[i],
                              kendall_tau(predicted, measured), len(programs), tau_interval(predicted, measured),
                              extractor, kendall_p(predicted, measured), m.unit,
                              top_k_regret(predicted, measured, 1), top_k_regret(predicted, measured, 5),
                              mean_abs_error(predicted, measured, m.unit),
                              kendall_tau([predicted[i] for i in near], [measured[i] for i in near]), len(near)))
    return records, predictions


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


def run_record(opts: Options, names: list[str], samples: int, runs: int, seed: int, timed: bool,
               program_set_path: str = "", clock: str = "cpu", repeats: int = 1) -> dict:
    """What a compare-costs run's figures depend on: the machine, the versions and commit,
    the seed and the settings (provenance.machine, provenance.software)."""
    settings = {"samples": samples, "runs": runs, "seed": seed, "cost_models": names, "extractor": opts.extractor,
                "target": opts.target, "layout": opts.layout, "hardware": str(opts.hardware),
                "dims": dict(opts.dims), "rules": [str(r) for r in opts.rule_files], "timed": timed,
                "programs": program_set_path or None, "clock": clock, "repeats": repeats, "threads": 1,
                "onnxruntime_optimizations": False}
    return {"machine": provenance.machine(), "software": provenance.software(), "settings": settings}


def as_json(records: list[Record], info: dict, run: dict | None = None) -> dict:
    """What `compare-costs --json` writes: the run (run_record), the per-model rows, the
    noise floor, and every program timed with its kind, latency (median, its 95 % interval
    and every sample), node count, each model's prediction and the models that chose it."""
    programs = [{"kind": info["kinds"][i], "measured_ms": info["measured_ms"][i],
                 "measured_95": _pair(median_interval(info["samples_ms"][i])), "samples_ms": info["samples_ms"][i],
                 "nodes": info["nodes"][i], "predicted": {m: p[i] for m, p in info["predicted"].items()},
                 "chosen_by": [m for m, k in info["chosen_by"].items() if k == i]} for i in range(info["programs"])]
    noise = info.get("noise_floor")
    if noise:
        noise = {**noise, "ratio_95": _pair(noise.get("ratio_95"))}
    return {**(run or {}), "note": info.get("note", ""), "cost_models": [r.as_dict() for r in records],
            "noise_floor": noise, "programs": programs}


def program_set_json(info: dict, run: dict) -> dict:
    """What `--save-programs` writes (eqsat.backends.ort.program_set)."""
    return program_sets.as_json(info["egraph"], info["choices"], info["kinds"], info["samples_ms"], info["nodes"],
                                run, info.get("noise_floor"))


def _pair(x) -> list | None:
    return None if x is None else list(x)


def table(records: list[Record]) -> str:
    """One row per cost model: its predicted cost of its own choice (in its own unit), that
    choice's measured latency (n/a: not among stored programs), Kendall's tau over every
    program timed (n/a: fewer than two distinct programs, or all predicted alike) with its
    95 % interval (from MIN_INTERVAL programs on) and p-value, its tau among the programs
    measured within 10 % of the fastest (compare_stats.near_best), its top-1 and top-5 regret,
    and the mean absolute error of its predicted time (blank for models that do not predict
    time)."""
    lines = [f"{'cost model':12s} {'predicted':>16s} {'measured ms':>12s} {'Kendall tau [95 %]':>22s} {'p':>7s} "
             f"{'tau near':>9s} {'top-1':>7s} {'top-5':>7s} {'MAE ms':>9s}"]
    for r in records:
        tau = "n/a" if r.kendall_tau is None else f"{r.kendall_tau:.3f}"
        if r.tau_interval:
            tau += f" [{r.tau_interval[0]:.2f}, {r.tau_interval[1]:.2f}]"
        p = "" if r.p_value is None else f"{r.p_value:.2g}"
        pred = f"{r.predicted:.3f} {r.unit}".rstrip()
        ms = "n/a" if r.measured_ms is None else f"{r.measured_ms:.3f}"
        top1, top5 = (("" if x is None else f"{100 * x:.1f}%") for x in (r.top1_regret, r.top5_regret))
        mae = "" if r.mae_ms is None else f"{r.mae_ms:.3f}"
        near = "n/a" if r.near_tau is None else f"{r.near_tau:.3f}"
        lines.append(f"{r.cost_model:12s} {pred:>16s} {ms:>12s} {tau:>22s} {p:>7s} {near:>9s} {top1:>7s} {top5:>7s} "
                     f"{mae:>9s}")
    return "\n".join(lines)


def noise_line(info: dict) -> str:
    """The A-vs-A noise floor in words, or "" without one."""
    noise = info.get("noise_floor")
    if not noise:
        return ""
    lo_hi = noise.get("ratio_95")
    within = f" [95 %: {lo_hi[0]:.3f}, {lo_hi[1]:.3f}]" if lo_hi else ""
    line = (f"noise floor: program {noise['program']} timed again as a separate entry ran "
            f"{noise['ratio']:.3f}x its first timing{within}")
    if ceiling := noise.get("repeat_ceiling"):
        taus = [("n/a" if t is None else f"{t:.3f}") for t in (ceiling["tau"], ceiling["tau_near"])]
        line += (f"\nrepeat ceiling: {noise['repeats']} repeats in fresh processes; their halves agree with "
                 f"tau {taus[0]} over all programs and {taus[1]} among the {ceiling['near']} near-best")
    return line
