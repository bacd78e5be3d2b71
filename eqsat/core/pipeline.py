"""The optimization pipeline: load -> encode -> saturate -> serialize -> extract -> decode.

`optimize()` takes and returns ModelProto; the CLI adds files, verification and reports.
"""

from __future__ import annotations

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
    effective_layout,
    forbidden_constructors,
    foreign_block_warning,
    hardware_facts,
    hardware_profile,
    opset_facts,
    profile_id,
)
from eqsat.core.decode import Decoder
from eqsat.core.encode import Encoder
from eqsat.core.modelcheck import check_model
from eqsat.core.saturate import Limits, Saturator
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
    PluginError,
    check,
    choice_file,
    dag_cost,
    extractor_class,
    get_extractor,
    tree_cost,
)
from eqsat.extract.costs import DEFAULT as COST_MODEL_DEFAULT
from eqsat.extract.costs import CostModel, HardwareProfileError, Roofline, make_cost_model
from eqsat.extract.work import chosen_nodes, input_nodes, work
from eqsat.io.atomic import write_text
from eqsat.lang.ops import spec_for
from eqsat.oracle import Oracle
from eqsat.report import REPORT_VERSION

FOLD_LIMIT = 1 << 20  # bytes: larger folded constants only where no larger than their inputs


@contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the duration, restored after. The pipeline
    builds millions of small objects (the serialized e-graph, terms, extraction choices) and
    frees them by reference counting; the collector's passes over a heap that keeps growing
    cost time that grew faster than the model: a 40k-node graph (benchmarks/scaling.py) took
    91 s of CPU with it and 68 s without, at the same peak memory."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class Options:
    rule_files: list[Path] = field(default_factory=list)
    default_rules: bool = True
    limits: Limits = field(default_factory=Limits)
    extractor: str = "ilp"
    extract_time_limit: float = 60.0  # seconds; the ILP falls back to the greedy answer past it
    cost_model: str = COST_MODEL_DEFAULT
    target: str = "ort"
    hardware: str = "cpu"  # profile for the roofline cost model
    dims: dict[str, int] = field(default_factory=dict)  # sizes of symbolic dimensions, by name
    fold_limit: int = FOLD_LIMIT
    save_egraph: Path | None = None
    explain: bool = False  # instrumented rules; the report gets an `explain` section (eqsat.core.explain)
    layout: str = "nchwc"  # also onnxruntime's channel-blocked CPU layout where it has it; nchw: not (eqsat.backends.ort.target)
    choice: Path | None = None  # a choice file (extract/choice_file.py) decoded instead of extracting


@dataclass
class Result:
    model: ModelProto
    report: dict
    # the output model's random nodes (first output names) -> the original's: verification
    # feeds each the same draw (eqsat.verification.standins)
    random_pairs: dict[str, str] = field(default_factory=dict)


def op_histogram(model: ModelProto) -> Counter:
    return Counter((f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type for n in model.graph.node)


@dataclass
class Saturated:
    """A model after saturation: the serialized e-graph and what decoding needs. Extract
    and decode as often as wanted (compare-costs extracts with every cost model)."""

    model: ModelProto
    opts: Options
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
        cost = cost or cost_model(self.opts)
        return run_extractor(self.egraph, extractor or self.opts.extractor, cost, self.opts.extract_time_limit)

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


def extractor_type(name: str) -> type:
    """The extractor class of that name (registered or an installed plugin's); a name there
    is none of, or a broken plugin, is a UsageError."""
    try:
        return extractor_class(name)
    except (KeyError, PluginError) as e:
        raise UsageError(str(e).strip("'\"")) from None


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


def cost_model(opts: Options) -> CostModel:
    try:
        return make_cost_model(opts.cost_model, hardware_profile(opts.hardware), opts.dims)
    except (FileNotFoundError, KeyError, HardwareProfileError, PluginError) as e:
        raise UsageError(str(e).strip("'\"")) from None


def check_options(opts: Options) -> None:
    """Raise UsageError for an unknown extractor, cost model or hardware profile: what
    needs no model, checked before one is read or saturated."""
    extractor_type(opts.extractor)
    cost_model(opts)


@gc_paused()
def saturate(model: ModelProto, opts: Options, progress: Callable[[str], None] | None = None,
             measure: bool = False) -> Saturated:
    """Encode, saturate (rules and oracles), serialize; `measure` also times every op
    configuration for the measured cost model (always when that is the chosen model)."""
    say = progress or (lambda _msg: None)
    times: dict[str, float] = {}
    warnings: list[str] = []

    def phase(name: str, t0: float) -> None:
        times[name] = round(time.perf_counter() - t0, 4)

    check_environment()
    check_model(model)
    check_options(opts)
    hardware = hardware_profile(opts.hardware)
    if hardware != opts.hardware:
        say(f"hardware profile {hardware} for {opts.hardware} on this machine")
    layout = effective_layout(opts.target, opts.layout)  # nchw where nchwc has no kernels or target
    if w := foreign_block_warning(hardware, layout):
        warnings.append(w)

    t0 = time.perf_counter()
    types, warning = infer_types(model)
    if warning:
        warnings.append(warning)
    phase("shape_inference", t0)

    t0 = time.perf_counter()
    sat = Saturator(opts.rule_files, opts.default_rules, explain=opts.explain)
    phase("load_rules", t0)
    say(f"inferred shapes in {times['shape_inference']:.2f} s, loaded the rules in {times['load_rules']:.2f} s")

    t0 = time.perf_counter()
    tensors, protos, dims = TensorStore(), ProtoStore(), DimTable()
    try:
        enc = Encoder(model, types, tensors, protos, dims).encode()
        sat.run_batch(enc.commands + opset_facts(model, opts.target, opts.layout)
                      + hardware_facts(hardware))
    except BaseException:
        sat.close()
        raise
    phase("encode", t0)
    say(f"encoded {enc.n_nodes} nodes ({sum(enc.opaque.values())} typed ops carried opaque) in {times['encode']:.2f} s")

    roots = [enc.value_id[o] for o in enc.outputs]
    forbidden = forbidden_constructors(model, opts.target)

    rows: list = []
    last: list[dict] = []  # the oracle's latest snapshot

    def snapshot() -> dict:
        data = serialize(sat.eg, roots, enc.outputs, list(sat.declared.constructors), sat.declared.functions,
                         dims, protos, forbidden)
        if opts.explain:
            from eqsat.core.explain import split_rows

            rows[:] = split_rows(data)
        last[:] = [data]
        return data

    oracle = Oracle(model, tensors, protos, dims, snapshot, opts.fold_limit)
    try:
        sat_report = sat.saturate(opts.limits, hooks=[oracle] if opts.default_rules else [], progress=say)
        times["saturate"] = round(sat_report.time_s, 4)
        say(f"saturation stopped: {sat_report.stop_reason} after {sat_report.iterations} rounds, "
            f"{sat_report.enodes} e-nodes, {sat_report.time_s:.2f} s")
        t0 = time.perf_counter()
        # saturated: the last round's rules changed nothing and the oracle, which ran after them
        # on the e-graph as it now is, added nothing: its snapshot is the final e-graph
        data = last[0] if sat_report.stop_reason == "saturated" and last else snapshot()
        phase("serialize", t0)
    finally:
        sat.close()
    if measure or opts.cost_model == "measured":
        from eqsat.backends.ort.measure import Measurer

        t0 = time.perf_counter()
        measurer = Measurer(model, tensors, protos, opts.dims)
        measurer.annotate(data)
        phase("measure", t0)
        say(f"measured {measurer.timed} new op configurations in {times['measure']:.1f} s")
    # what produced this e-graph (its facts depend on the profile, its ops on target and
    # layout): a saved e-graph's reader extracts with the same profile (docs/extraction.md)
    data["eqsat"]["settings"] = {
        "hardware": profile_id(hardware), "target": opts.target, "layout": layout,
        "default_rules": opts.default_rules, "rules": [str(f) for f in opts.rule_files], "dims": dict(opts.dims),
        "fold_limit": opts.fold_limit, "explain": opts.explain, "iter_limit": opts.limits.iter_limit,
        "node_limit": opts.limits.node_limit, "time_limit": opts.limits.time_limit,
        "stop_reason": sat_report.stop_reason}  # a time limit's stop is not reproducible
    value_class = data["eqsat"]["value_class"]
    egraph = EGraph.from_json(data, trusted=True)  # serialized here, not read from a file
    # the input program, one e-node per input node: its work bounds the extraction's (extract/work.py)
    picked = input_nodes(egraph, _input_nodes(model, enc, value_class))
    data["eqsat"]["input_nodes"] = egraph.meta["input_nodes"] = [n for n in picked if n is not None]
    # only a whole input program bounds extraction (a node left unmatched would lower the bound)
    data["eqsat"]["input_complete"] = egraph.meta["input_complete"] = all(n is not None for n in picked)
    if opts.save_egraph:
        write_text(opts.save_egraph, json.dumps(data))

    value_names: dict[str, list[str]] = {}
    for name, vid in enc.value_id.items():
        c = value_class.get(str(vid))
        if c is not None:
            value_names.setdefault(c, []).append(name)
    report = {
        "nodes_before": len(model.graph.node),
        "opaque": dict(enc.opaque.most_common()),
        "target": opts.target,
        "hardware": profile_id(hardware),  # the profile used: its rules' guards and the cost model's rates
        "layout": layout,
        "oracle": oracle.report(),
        "saturation": {
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
        },
        "warnings": warnings,
    }
    return Saturated(model, opts, data, egraph, tensors, protos, value_names, report, times,
                     rows if opts.explain else None, fact_uses=sat.fact_uses, instances=enc.instances,
                     contradicted=set(contradicted_declarations(model, types)))


def work_report(egraph: EGraph, choice: dict[str, str], opts: Options) -> dict:
    """The input program's work beside the output's (extract/work.py: FLOPs, the FLOPs on
    weights a rule padded, bytes moved, contractions, ops of the main graph at the bound
    sizes), and `more`: what the output does more of, if anything: contractions, or FLOPs
    beyond those on padding (padding a rule declares adds FLOPs, never contractions)."""
    roof = Roofline(hardware_profile(opts.hardware), opts.dims)
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
def optimize(model: ModelProto, opts: Options, progress: Callable[[str], None] | None = None) -> Result:
    check_environment()
    check_model(model)
    picked = read_choice(opts.choice) if opts.choice else None  # a bad file fails before any work
    t0 = time.perf_counter()
    model, subgraphs = optimize_subgraphs(model, opts, progress, optimize=optimize)  # each as a model of its own
    t_sub = round(time.perf_counter() - t0, 4)
    st = saturate(model, opts, progress)
    if subgraphs:
        st.times["subgraphs"] = t_sub
    cost = cost_model(opts)
    t0 = time.perf_counter()
    ex = st.choose(picked, opts.choice, cost) if picked else st.extract(cost)
    st.times["extract"] = round(time.perf_counter() - t0, 4)
    t0 = time.perf_counter()
    out = st.decode(ex.choice)
    st.times["decode"] = round(time.perf_counter() - t0, 4)
    if progress:
        progress(f"extracted with {ex.extractor} ({cost.name}, DAG cost {ex.dag_cost:g}) in {st.times['extract']:.2f} s, "
                 f"decoded {len(out.graph.node)} nodes in {st.times['decode']:.2f} s")
    before, after = op_histogram(model), op_histogram(out)
    report = {
        "version": REPORT_VERSION,  # eqsat.report: the report's types, docs/report.md
        "nodes_before": len(model.graph.node),
        "nodes_after": len(out.graph.node),
        "ops_before": dict(before.most_common()),
        "ops_after": dict(after.most_common()),
        **{k: v for k, v in st.report.items() if k not in ("nodes_before", "warnings")},
        "extraction": {
            "extractor": ex.extractor,
            "cost_model": cost.name,
            "tree_cost": ex.tree_cost,
            "dag_cost": ex.dag_cost,
            "time_s": round(ex.time_s, 4),
            "notes": ex.notes,
        },
        "work": work_report(st.egraph, ex.choice, opts),
        "times_s": st.times,
        "warnings": st.report["warnings"],
    }
    if (more := report["work"]["more"]) and st.egraph.meta.get("input_complete"):
        w = report["work"]
        report["warnings"].append("the output does more " + " and ".join(
            f"{k} than the input ({w['input'][k]:.4g} -> {w['output'][k]:.4g}"
            + (f", of them {w['output']['padding_flops']:.4g} on padding" if k == "flops" else "") + ")"
            for k in more))
    if subgraphs:
        report["subgraphs"] = subgraphs
    if opts.explain:
        from eqsat.core.explain import explain

        t0 = time.perf_counter()
        report["explain"] = explain(model, out, st.egraph, ex.choice, st.decoder, st.value_names, st.explain_rows or [],
                                    st.fact_uses)
        st.times["explain"] = round(time.perf_counter() - t0, 4)
    pairs = {name: st.instances[tag] for tag, name in st.decoder.instances.items() if tag in st.instances}
    return Result(out, report, pairs)
