"""The optimization pipeline: load -> encode -> saturate -> serialize -> extract -> decode.

`optimize()` takes and returns ModelProto; the CLI adds files, verification and reports.
"""

from __future__ import annotations

import functools
import gc
import json
import math
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from onnx import ModelProto

from eqsat.backends.ort.target import (
    forbidden_constructors,
    foreign_block_warning,
    hardware_facts,
    opset_facts,
    u8s8_exact,
)
from eqsat.core import requantize
from eqsat.core.decode import Decoder
from eqsat.core.encode import Encoder
from eqsat.core.modelcheck import check_model
from eqsat.core.saturate import Saturator
from eqsat.core.serialize import serialize
from eqsat.core.shapes import DimTable, contradicted_declarations, infer_types
from eqsat.core.store import ProtoStore, TensorStore
from eqsat.core.subgraphs import optimize_subgraphs
from eqsat.environment import check_environment
from eqsat.errors import OptimizeError, UsageError, extraction_errors
from eqsat.extract import (
    EGraph,
    Extraction,
    ExtractionError,
    check,
    choice_file,
    dag_cost,
    extractor_class,
    get_extractor,
    tree_cost,
)
from eqsat.extract.costs import CostModel, Roofline
from eqsat.extract.work import chosen_nodes, input_nodes, work
from eqsat.io.atomic import write_text
from eqsat.lang.ops import spec_for
from eqsat.oracle import Oracle
from eqsat.report import REPORT_VERSION
from eqsat.settings import FOLD_LIMIT, Options, Settings, check_extractor, resolve

__all__ = ["FOLD_LIMIT", "Options", "Result", "Saturated", "Settings", "cost_model", "optimize", "saturate"]


@contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the duration, restored after. The pipeline
    builds millions of small objects (the serialized e-graph, terms, extraction choices) and
    frees them by reference counting; the collector's passes over a heap that only grows cost
    time that grows faster than the model and free nothing (figures: benchmarks/scaling.py)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class Result:
    model: ModelProto
    report: dict
    # the output model's random nodes (first output names) -> the original's: verification
    # feeds each the same draw (eqsat.verification.standins)
    random_pairs: dict[str, str] = field(default_factory=dict)
    # level -> the same e-graph extracted again with fewer requantizing fusions
    # (eqsat.core.requantize), or None where that level changes nothing
    retry: Callable[[str], Result | None] | None = None


def op_histogram(model: ModelProto) -> Counter:
    return Counter((f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type for n in model.graph.node)


@dataclass
class Saturated:
    """A model after saturation: the serialized e-graph and what decoding needs. Extract
    and decode as often as wanted (compare-costs extracts with every cost model)."""

    model: ModelProto
    settings: Settings
    data: dict  # egraph-serialize JSON with eqsat's metadata
    egraph: EGraph
    tensors: TensorStore
    protos: ProtoStore
    value_names: dict[str, list[str]]  # e-class -> original value names
    report: dict  # everything but the extraction and the output
    times: dict[str, float]
    explain_rows: list | None = None  # provenance rows (eqsat.core.explain.split_rows), with opts.explain
    decoder: Decoder | None = None  # the last decode's, for explain
    instances: dict[str, str] = field(default_factory=dict)  # random nodes: tag -> first output (Encoder)
    fact_uses: dict[str, set[str]] = field(default_factory=dict)  # rule -> fact rules it read (explain)
    contradicted: set[str] = field(default_factory=set)  # values whose declared type inference contradicts

    def extract(self, cost: CostModel | None = None, extractor: str | None = None) -> Extraction:
        s = self.settings
        return run_extractor(self.egraph, extractor or s.extractor, cost or s.cost, s.extract_time_limit)

    def choose(self, picked: tuple[dict[str, str], dict], path: Path, cost: CostModel) -> Extraction:
        """The choice a file held (`choice_file.read`), as an extraction (`file_choice`)."""
        return file_choice(self.egraph, picked, path, cost, "this e-graph")

    def decode(self, choice: dict[str, str]) -> ModelProto:
        self.decoder = Decoder(self.model, self.egraph, choice, self.tensors, self.protos, self.value_names,
                               self.contradicted)
        return self.decoder.decode(self.egraph.roots)


def file_choice(egraph: EGraph, picked: tuple[dict[str, str], dict], path: Path, cost: CostModel,
                what: str) -> Extraction:
    """A choice file's choice as an extraction priced by `cost`: it must be made on this
    e-graph (its digest, when it records one) and pass the checker, else OptimizeError
    "PATH: not a valid choice for WHAT: reason"; a model that cannot price the e-graph is
    UnpricedChoice, an OptimizeError that carries the valid choice."""
    choice, meta = picked
    with extraction_errors(f"{path}: not a valid choice for {what}"):
        why = choice_file.same_egraph(meta, egraph)
        if why:
            raise ExtractionError(why)
        check(egraph, choice)
    made = f"made by {meta['extractor']} under {meta.get('cost_model', '?')}" if "extractor" in meta else ""
    try:
        with extraction_errors("", cost):
            costs = cost.costs(egraph)
    except OptimizeError as e:
        reason = str(e).removeprefix(": ")
        raise UnpricedChoice(f"{path}: cost model {cost.name} cannot price it: {reason}", reason) from None
    return Extraction(choice, f"choice file {Path(path).name}", tree_cost(egraph, choice, costs),
                      dag_cost(egraph, choice, costs), notes=[made] if made else [])


class UnpricedChoice(OptimizeError):
    """A valid choice that the cost model cannot price (`measured` on an e-graph without
    times); `reason` says why."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


extractor_type = check_extractor  # the name the pipeline's callers know


def run_extractor(egraph: EGraph, name: str, cost: CostModel, time_limit: float | None = None) -> Extraction:
    """Extract with the named extractor and check its answer; a failed check, a broken cost
    contract or a plugin's exception is one OptimizeError line (errors.extraction_errors)."""
    with extraction_errors("extraction failed", extractor_class(name), cost):
        ex = get_extractor(name, time_limit).extract(egraph, cost)
        if not isinstance(ex, Extraction):
            raise ExtractionError(f"extractor {name} returned {type(ex).__name__}, not an extract.Extraction")
        check(egraph, ex.choice)
        # the costs reported are the choice's own under the cost model, whatever the
        # extractor says (a plugin's figures are its own claim)
        costs = cost.costs(egraph)
        tree, dag = tree_cost(egraph, ex.choice, costs), dag_cost(egraph, ex.choice, costs)
        if not (math.isclose(dag, ex.dag_cost, rel_tol=1e-6, abs_tol=1e-9)
                and math.isclose(tree, ex.tree_cost, rel_tol=1e-6, abs_tol=1e-9)):
            ex.notes.append(f"extractor {name} reported DAG cost {ex.dag_cost:g} and tree cost {ex.tree_cost:g}; "
                            f"the choice's own under {cost.name}: {dag:g} and {tree:g} (reported here)")
            ex.dag_cost, ex.tree_cost = dag, tree
    return ex


def read_choice(path: Path) -> tuple[dict[str, str], dict]:
    """`choice_file.read`, its faults a UsageError: read before any work is done."""
    try:
        return choice_file.read(path)
    except choice_file.ChoiceFileError as e:
        raise UsageError(str(e)) from None


def cost_model(opts: Options | Settings) -> CostModel:
    """The cost model `opts` name, on the profile they resolve to (eqsat.settings.resolve)."""
    return resolve(opts).cost


def check_options(opts: Options | Settings) -> Settings:
    """`opts` resolved (eqsat.settings.resolve): an unknown extractor, cost model, target or
    hardware profile is a UsageError, raised before a model is read or saturated."""
    return resolve(opts)


class _Clock:
    """Each phase's seconds (the report's times_s) and the warnings met on the way."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self.warnings: list[str] = []

    def phase(self, name: str, t0: float) -> None:
        self.times[name] = round(time.perf_counter() - t0, 4)


@gc_paused()
def saturate(model: ModelProto, opts: Options | Settings, progress: Callable[[str], None] | None = None,
             measure: bool = False) -> Saturated:
    """Encode, saturate (rules and oracles), serialize; `measure` also times every op
    configuration for the measured cost model (always when that is the chosen model)."""
    s = resolve(opts)
    say = progress or (lambda _msg: None)
    clock = _Clock()
    check_environment()
    check_model(model)
    if s.profile != s.hardware:
        say(f"hardware profile {s.profile} for {s.hardware} on this machine")
    if w := foreign_block_warning(s.profile, s.effective_layout):  # nchw where nchwc has no kernels or target
        clock.warnings.append(w)
    types, sat, enc, stores = _encode(model, s, clock, say)
    roots = [enc.value_id[o] for o in enc.outputs]
    forbidden = forbidden_constructors(model, s.target)
    rows: list = []
    last: list[dict] = []  # the oracle's latest snapshot

    def snapshot() -> dict:
        data = serialize(sat.eg, roots, enc.outputs, list(sat.declared.constructors), sat.declared.functions,
                         stores[2], stores[1], forbidden)
        if s.explain:
            from eqsat.core.explain import split_rows

            rows[:] = split_rows(data)
        last[:] = [data]
        return data

    oracle = Oracle(model, stores[0], stores[1], stores[2], snapshot, s.fold_limit)
    try:
        sat_report = sat.saturate(s.limits, hooks=[oracle] if s.default_rules else [], progress=say)
        clock.times["saturate"] = round(sat_report.time_s, 4)
        say(f"saturation stopped: {sat_report.stop_reason} after {sat_report.iterations} rounds, "
            f"{sat_report.enodes} e-nodes, {sat_report.time_s:.2f} s")
        t0 = time.perf_counter()
        # saturated: the last round's rules changed nothing and the oracle, which ran after them
        # on the e-graph as it now is, added nothing: its snapshot is the final e-graph
        data = last[0] if sat_report.stop_reason == "saturated" and last else snapshot()
        clock.phase("serialize", t0)
    finally:
        sat.close()
    if measure or s.cost_model == "measured":
        _measure(model, data, stores, s, clock, say)
    egraph = _egraph(model, enc, data, s, sat_report.stop_reason)
    report = {
        "nodes_before": len(model.graph.node),
        "opaque": dict(enc.opaque.most_common()),
        "target": s.target,
        "hardware": s.profile_id,  # the profile used: its rules' guards and the cost model's rates
        "layout": s.effective_layout,
        "oracle": oracle.report(),
        "saturation": _saturation_report(sat_report, egraph),
        "warnings": clock.warnings,
    }
    return Saturated(model, s, data, egraph, stores[0], stores[1], _value_names(enc, data), report, clock.times,
                     rows if s.explain else None, fact_uses=sat.fact_uses, instances=enc.instances,
                     contradicted=set(contradicted_declarations(model, types)))


def _encode(model: ModelProto, s: Settings, clock: _Clock, say: Callable[[str], None]):
    """Shape inference, the rules loaded, the model encoded with the target's and the
    profile's facts: (types, the Saturator, the Encoder, (tensors, protos, dims))."""
    t0 = time.perf_counter()
    types, warning = infer_types(model)
    if warning:
        clock.warnings.append(warning)
    clock.phase("shape_inference", t0)
    t0 = time.perf_counter()
    sat = Saturator(list(s.rule_files), s.default_rules, explain=s.explain)
    clock.phase("load_rules", t0)
    times = clock.times
    say(f"inferred shapes in {times['shape_inference']:.2f} s, loaded the rules in {times['load_rules']:.2f} s")
    t0 = time.perf_counter()
    tensors, protos, dims = TensorStore(), ProtoStore(), DimTable()
    try:
        enc = Encoder(model, types, tensors, protos, dims).encode()
        sat.run_batch(enc.commands + opset_facts(model, s.target, s.layout) + hardware_facts(s.profile))
    except BaseException:
        sat.close()
        raise
    clock.phase("encode", t0)
    say(f"encoded {enc.n_nodes} nodes ({sum(enc.opaque.values())} typed ops carried opaque) in {times['encode']:.2f} s")
    return types, sat, enc, (tensors, protos, dims)


def _measure(model: ModelProto, data: dict, stores: tuple, s: Settings, clock: _Clock,
             say: Callable[[str], None]) -> None:
    """Time every op configuration of the e-graph for the measured cost model (into `data`)."""
    from eqsat.backends.ort.measure import Measurer

    t0 = time.perf_counter()
    measurer = Measurer(model, stores[0], stores[1], s.dims)
    measurer.annotate(data)
    clock.phase("measure", t0)
    say(f"measured {measurer.timed} new op configurations in {clock.times['measure']:.1f} s")


def _egraph(model: ModelProto, enc, data: dict, s: Settings, stop_reason: str) -> EGraph:
    """The serialized e-graph as an EGraph, its metadata completed: the settings that made it
    and the input program (written to --save-egraph as well)."""
    # what produced this e-graph (its facts depend on the profile, its ops on target and
    # layout): a saved e-graph's reader extracts with the same profile (docs/extraction.md)
    data["eqsat"]["settings"] = {
        "hardware": s.profile_id, "target": s.target, "layout": s.effective_layout,
        "default_rules": s.default_rules, "rules": [str(f) for f in s.rule_files], "dims": s.dims,
        "fold_limit": s.fold_limit, "explain": s.explain, "iter_limit": s.limits.iter_limit,
        "node_limit": s.limits.node_limit, "time_limit": s.limits.time_limit,
        "stop_reason": stop_reason,  # a time limit's stop is not reproducible
        "u8s8_exact": s.target == "ort" and u8s8_exact()}  # this machine's, a fact the rules read
    egraph = EGraph.from_json(data, trusted=True)  # serialized here, not read from a file
    # the input program, one e-node per input node: its work bounds the extraction's (extract/work.py)
    picked = input_nodes(egraph, _input_nodes(model, enc, data["eqsat"]["value_class"]))
    data["eqsat"]["input_nodes"] = egraph.meta["input_nodes"] = [n for n in picked if n is not None]
    # only a whole input program bounds extraction (a node left unmatched would lower the bound)
    data["eqsat"]["input_complete"] = egraph.meta["input_complete"] = all(n is not None for n in picked)
    if s.save_egraph:
        write_text(s.save_egraph, json.dumps(data))
    return egraph


def _value_names(enc, data: dict) -> dict[str, list[str]]:
    """E-class -> the original value names it holds."""
    value_class = data["eqsat"]["value_class"]
    names: dict[str, list[str]] = {}
    for name, vid in enc.value_id.items():
        c = value_class.get(str(vid))
        if c is not None:
            names.setdefault(c, []).append(name)
    return names


def _saturation_report(sat_report, egraph: EGraph) -> dict:
    return {
        "stop_reason": sat_report.stop_reason,
        "stop_detail": sat_report.stop_detail,
        "iterations": sat_report.iterations,
        "enodes_before": sat_report.enodes_before,
        "enodes": sat_report.enodes,
        "eclasses": len(egraph.classes),
        "rule_matches": dict(sat_report.rule_matches.most_common()),
        "rewrite_matches": dict(sat_report.rewrite_matches.most_common()),  # rule_matches split in two
        "analysis_matches": dict(sat_report.analysis_matches.most_common()),
        "rounds": sat_report.rounds,
    }


def work_report(egraph: EGraph, choice: dict[str, str], s: Settings) -> dict:
    """The input program's work beside the output's (extract/work.py: FLOPs, the FLOPs on
    weights a rule padded, bytes moved, contractions, ops of the main graph at the bound
    sizes), and `more`: what the output does more of, if anything: contractions, or FLOPs
    beyond those on padding (padding a rule declares adds FLOPs, never contractions)."""
    roof = Roofline(s.profile, s.dims)
    before = work(egraph, egraph.meta.get("input_nodes", []), roof)
    after = work(egraph, chosen_nodes(egraph, choice), roof)
    more = [k for k in ("contractions",) if after[k] > before[k]]
    if after["flops"] - after["padding_flops"] > (before["flops"] - before["padding_flops"]) * (1 + 1e-9):
        more.append("flops")
    return {"input": before, "output": after, "more": more}


def _input_nodes(model: ModelProto, enc, value_class: dict) -> list[tuple[str, str, list[str]]]:
    """The main graph's nodes as (op, output e-class, input e-classes) (extract.work.input_nodes)."""
    def cls(name: str) -> str | None:
        vid = enc.value_id.get(name)
        return None if vid is None else value_class.get(str(vid))

    out = []
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            continue  # a leaf (Const, Ints, ScalarF): no work
        c = cls(n.output[0]) if n.output else None
        spec = spec_for(n.domain, n.op_type)  # the constructor that encodes it (nchwc's Conv: NchwcConv)
        if c is not None:
            out.append((spec.ctor if spec else "Opaque", c, [k for k in map(cls, n.input) if k is not None]))
    return out


@gc_paused()
def optimize(model: ModelProto, opts: Options | Settings, progress: Callable[[str], None] | None = None) -> Result:
    """Optimize `model` (subgraphs first, each as a model of its own), with `opts` resolved
    once (eqsat.settings.resolve) and passed on as Settings: the output model, the report
    (its contents: docs/report.md), and the random nodes' pairs for verification."""
    s = resolve(opts)
    check_environment()
    check_model(model)
    picked = read_choice(s.choice) if s.choice else None  # a bad file fails before any work
    t0 = time.perf_counter()
    model, subgraphs = optimize_subgraphs(model, s, progress, optimize=optimize)  # each as a model of its own
    t_sub = round(time.perf_counter() - t0, 4)
    st = saturate(model, s, progress)
    if subgraphs:
        st.times["subgraphs"] = t_sub
    t0 = time.perf_counter()
    ex = st.choose(picked, s.choice, s.cost) if picked else st.extract(s.cost)
    st.times["extract"] = round(time.perf_counter() - t0, 4)
    res = _decoded(st, ex, subgraphs, progress)
    if not picked and (requantize.requantizing(st.egraph, ex.choice)
                       or requantize.blocks_quantized(st.model, st.egraph, ex.choice)):
        res.retry = _retries(st, ex.choice, subgraphs, progress)
    return res


def _decoded(st: Saturated, ex: Extraction, subgraphs: list, progress: Callable[[str], None] | None) -> Result:
    """The extraction `ex` of `st` decoded, with its report."""
    s, model = st.settings, st.model
    t0 = time.perf_counter()
    out = st.decode(ex.choice)
    st.times["decode"] = round(time.perf_counter() - t0, 4)
    if progress:
        progress(f"extracted with {ex.extractor} ({s.cost.name}, DAG cost {ex.dag_cost:g}) "
                 f"in {st.times['extract']:.2f} s, "
                 f"decoded {len(out.graph.node)} nodes in {st.times['decode']:.2f} s")
    report = _report(model, out, st, ex, s)
    if subgraphs:
        report["subgraphs"] = subgraphs
    if s.explain:
        from eqsat.core.explain import explain

        t0 = time.perf_counter()
        report["explain"] = explain(model, out, st.egraph, ex.choice, st.decoder, st.value_names, st.explain_rows or [],
                                    st.fact_uses)
        st.times["explain"] = round(time.perf_counter() - t0, 4)
    pairs = {name: st.instances[tag] for tag, name in st.decoder.instances.items() if tag in st.instances}
    return Result(out, report, pairs)


def _retries(st: Saturated, first: dict[str, str], subgraphs: list,
             progress: Callable[[str], None] | None) -> Callable[[str], Result | None]:
    """Result.retry for `st`, whose first extraction chose `first`: each level of
    eqsat.core.requantize extracted again from the e-graph it restricts; None where a level
    gives a program an earlier one gave (with folded weights: it keeps every requantizing
    fusion the previous choice made; without: the same choice, or no program so far ran a
    blocked Conv on a folded weight, so that a `-dq` level differs only in exact folds)."""
    previous = [requantize.requantizing(st.egraph, first)]
    choices = [first]
    dq_convs = requantize.dequantized_convs(st.egraph)
    ort_values = functools.cache(lambda: requantize.ort_requantized_values(st.model))

    def retry(level: str) -> Result | None:
        kept, folded = requantize.split_level(level)
        keep: set[str] | None = None if kept == "all" else set()
        if kept == "ort":
            keep = requantize.kept_classes(st.egraph, st.value_names, ort_values())
        if folded and keep is not None and previous[-1] <= keep:
            return None
        if not folded and not any(dq_convs.intersection(c.values()) for c in choices):
            return None
        s = st.settings
        t0 = time.perf_counter()
        ex = run_extractor(requantize.restricted(st.egraph, keep, folded), s.extractor, s.cost, s.extract_time_limit)
        st.times["extract"] = round(time.perf_counter() - t0, 4)
        if ex.choice in choices:
            return None
        choices.append(ex.choice)
        if folded:
            previous.append(requantize.requantizing(st.egraph, ex.choice))
        return _decoded(st, ex, subgraphs, progress)

    return retry


def _report(model: ModelProto, out: ModelProto, st: Saturated, ex: Extraction, s: Settings) -> dict:
    """The report of one optimization, before verification and the plan (docs/report.md)."""
    before, after = op_histogram(model), op_histogram(out)
    report = {
        "version": REPORT_VERSION,  # eqsat.report: the report's types, docs/report.md
        "nodes_before": len(model.graph.node),
        "nodes_after": len(out.graph.node),
        "ops_before": dict(before.most_common()),
        "ops_after": dict(after.most_common()),
        **{k: v for k, v in st.report.items() if k not in ("nodes_before", "warnings")},
        "settings": s.as_dict(),
        "extraction": {
            "extractor": ex.extractor,
            "cost_model": s.cost.name,
            "tree_cost": ex.tree_cost,
            "dag_cost": ex.dag_cost,
            "time_s": round(ex.time_s, 4),
            "notes": ex.notes,
            **({"status": ex.status} if ex.status else {}),
            **({"lower_bound": ex.lower_bound, "gap": ex.gap} if ex.lower_bound is not None else {}),
        },
        "work": work_report(st.egraph, ex.choice, s),
        "times_s": st.times,
        "warnings": st.report["warnings"],
    }
    if (more := report["work"]["more"]) and st.egraph.meta.get("input_complete"):
        w = report["work"]
        report["warnings"].append("the output does more " + " and ".join(
            f"{k} than the input ({w['input'][k]:.4g} -> {w['output'][k]:.4g}"
            + (f", of them {w['output']['padding_flops']:.4g} on padding" if k == "flops" else "") + ")"
            for k in more))
    return report
