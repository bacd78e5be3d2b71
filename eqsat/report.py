"""The optimization report (`eqsat optimize --report`, `eqsat.optimize(...).report`) as types.

The pipeline writes the report as JSON-ready dicts (eqsat.core.pipeline.optimize, the CLI
and eqsat.api add verification, plan, input and output); the dataclasses here are its
contract: `Report.from_dict` reads one, `Report.as_dict` writes it back unchanged, and
`json_schema()` derives the published JSON schema (docs/report.schema.json, draft 2020-12)
from their type hints, so that the schema cannot drift from them. docs/report.md describes
the keys.

Typing rules, which `json_schema` and the conversions share:
- a field typed `X | None` (default None) is a key that may be absent; None is never
  written, and no key of the report is ever null;
- `dict[str, X]` is an object with free keys (rule names, phases), `list[X]` an array,
  `Literal[...]` an enum, `Any` any JSON value, a dataclass an object of its fields;
- keys a reader does not know (added by a newer eqsat under the same version) are kept in
  `extra` and written back, never dropped.

Versioning: REPORT_VERSION increases when a key is removed or changes meaning; adding a key
does not change it. A report with no `version` key predates it and is version 1.

This module imports only the standard library. `python -m eqsat.report` prints the schema
(`python -m eqsat.report > docs/report.schema.json` regenerates the published copy).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

REPORT_VERSION = 1
SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _doc(text: str, **more: Any) -> dict[str, Any]:
    """Field metadata: its description in the schema (and anything else the schema should say)."""
    return {"doc": text, **more}


@dataclass(frozen=True)
class Section:
    """Base of the report's objects: read as the JSON dicts they were (`r.verification["status"]`)."""

    # keys this version does not know (a newer writer's), kept so that as_dict round-trips
    extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, kw_only=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        return _read(cls, d, cls.__name__)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: optional keys left out when None, `extra` keys kept."""
        out = {}
        for f in _fields(type(self)):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = _write(value)
        return {**out, **self.extra}

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.as_dict().get(key, default)


@dataclass(frozen=True)
class Oracle(Section):
    """What the constant-folding and shape oracles did (eqsat.oracle)."""

    folded: int = field(metadata=_doc("values folded to constants"))
    fold_refused: dict[str, int] = field(metadata=_doc("reason -> values not folded for it"))
    reshape_targets_rewritten: int = field(metadata=_doc("Reshape targets made constant"))
    if_inlined: int = field(metadata=_doc("If nodes with a constant condition inlined"))


@dataclass(frozen=True)
class Round(Section):
    """One saturation round."""

    round: int = field(metadata=_doc("1, 2, ..."))
    enodes: int = field(metadata=_doc("e-nodes after the round"))
    time_s: float = field(metadata=_doc("seconds, rules and oracle"))
    rules_s: float = field(metadata=_doc("seconds of the rules alone"))
    hooks: bool = field(metadata=_doc("whether the folding oracle ran after it"))


@dataclass(frozen=True)
class Saturation(Section):
    """Equality saturation: why it stopped, the e-graph's size, rule matches (eqsat.core.saturate)."""

    stop_reason: Literal["saturated", "iteration-limit", "node-limit", "time-limit"] = field(
        metadata=_doc("saturated: nothing changed; else the limit that stopped it"))
    stop_detail: str = field(metadata=_doc("the limit's value, empty when saturated"))
    iterations: int = field(metadata=_doc("rounds run"))
    enodes_before: int = field(metadata=_doc("e-nodes after encoding"))
    enodes: int = field(metadata=_doc("e-nodes at the end"))
    eclasses: int = field(metadata=_doc("e-classes of the serialized e-graph"))
    rule_matches: dict[str, int] = field(metadata=_doc("rule -> matches over all rounds"))
    rewrite_matches: dict[str, int] = field(metadata=_doc("rule_matches of rules that add an equal form"))
    analysis_matches: dict[str, int] = field(metadata=_doc("rule_matches of rules that only derive facts"))
    rounds: list[Round] = field(metadata=_doc("each round, in order"))


@dataclass(frozen=True)
class Extraction(Section):
    """How the output program was chosen from the e-graph (eqsat.extract)."""

    extractor: str = field(metadata=_doc("the extractor (ilp, dag-greedy, ..., or `choice file NAME`)"))
    cost_model: str = field(metadata=_doc("the cost model that priced the e-nodes"))
    tree_cost: float = field(metadata=_doc("the choice's cost counting shared nodes once per use"))
    dag_cost: float = field(metadata=_doc("the choice's cost counting each node once"))
    time_s: float = field(metadata=_doc("seconds the extractor took"))
    notes: list[str] = field(metadata=_doc("the extractor's remarks (time limits, fallbacks)"))
    status: Literal["optimal", "gap", "fallback"] | None = field(default=None, metadata=_doc(
        "an exact extractor's (the ILP's): optimal: proven; gap: its own answer, not proven optimal by the "
        "time limit; fallback: a greedy answer it fell back to"))
    lower_bound: float | None = field(default=None, metadata=_doc(
        "a proven lower bound on the optimum DAG cost of the problem the extractor solved (with its fixed "
        "layouts and work bound, where the notes name them); absent for extractors that prove none"))
    gap: float | None = field(default=None, metadata=_doc("(dag_cost - lower_bound) / dag_cost, at least 0"))


@dataclass(frozen=True)
class WorkFigures(Section):
    """The work of one program at the bound sizes (extract/work.py, docs/cost-models.md#work)."""

    flops: float = field(metadata=_doc("floating-point operations"))
    padding_flops: float = field(metadata=_doc("of them, those on weights a rule padded"))
    bytes: float = field(metadata=_doc("bytes moved"))
    contractions: int = field(metadata=_doc("contractions (MatMul, Conv, Gemm, ...)"))
    ops: int = field(metadata=_doc("ops of the main graph"))


@dataclass(frozen=True)
class Work(Section):
    """The input program's work beside the output's."""

    input: WorkFigures = field(metadata=_doc("the input program"))
    output: WorkFigures = field(metadata=_doc("the output program"))
    more: list[Literal["contractions", "flops"]] = field(metadata=_doc("what the output does more of"))


@dataclass(frozen=True)
class Verification(Section):
    """The comparison of the output with the input under onnxruntime (eqsat.verification)."""

    status: Literal["passed", "failed", "not possible", "skipped"] = field(metadata=_doc("the outcome"))
    detail: str = field(metadata=_doc("tolerances and runs, or why it failed, was not possible or skipped"))
    runs: int = field(metadata=_doc("sets of inputs compared"))
    inputs: str | None = field(default=None, metadata=_doc("what the integer and overridable inputs were fed"))
    not_verified: str | None = field(default=None, metadata=_doc("what the comparison did not cover"))
    edge_cases: str | None = field(default=None, metadata=_doc("the runs on special values and empty sizes"))


@dataclass(frozen=True)
class Requantization(Section):
    """Where verification refused the first program of a QDQ model for its rounding of a
    quantized output and a program with fewer requantizing fusions, or with weights
    dequantized at run time, passed (eqsat.core.requantize)."""

    kept: Literal["all", "ort", "none"] = field(metadata=_doc(
        "the requantizing fusions kept: all, the first program's; ort, where onnxruntime's own optimization of"
        " the input makes them; none"))
    weights_folded: bool = field(metadata=_doc(
        "whether weights that a DequantizeLinear computes are folded to float constants (with blocked convs on"
        " them); false: dequantized at run time as the input has them, where the folded program rounded a"
        " quantized output otherwise"))
    refused: str = field(metadata=_doc("why verification refused the first program"))


@dataclass(frozen=True)
class PlanSummary(Section):
    """The memory plan's headline figures (eqsat.plan, docs/memory-plan.md)."""

    arena_bytes: int = field(metadata=_doc("the arena's size"))
    lower_bound_bytes: int = field(metadata=_doc("the largest live set under the best order found"))
    model_order_lower_bound_bytes: int = field(metadata=_doc("the largest live set in the model's order"))
    no_reuse_bytes: int = field(metadata=_doc("every tensor its own memory"))
    inplace_saved_bytes: int = field(metadata=_doc("bytes saved by in-place ops"))
    heuristic: str = field(metadata=_doc("the placement heuristic"))
    order_heuristic: str = field(metadata=_doc("the node order heuristic"))
    alignment: int = field(metadata=_doc("offset alignment in bytes"))
    dims: dict[str, int] = field(metadata=_doc("the symbolic dimensions' sizes"))
    file: str | None = field(default=None, metadata=_doc("the --plan file (CLI only)"))


@dataclass(frozen=True)
class Subgraph(Section):
    """One If branch or Loop/Scan body, optimized as a model of its own (eqsat.core.subgraphs)."""

    path: str = field(metadata=_doc("node.attribute, nested ones joined by /"))
    op: str = field(metadata=_doc("the node's op"))
    nodes_before: int = field(metadata=_doc("the body's nodes before"))
    nodes_after: int | None = field(default=None, metadata=_doc("its nodes after, when optimized"))
    kept: str | None = field(default=None, metadata=_doc("why it was kept unchanged, when it was"))


@dataclass(frozen=True)
class RunSettings(Section):
    """The settings the run resolved once (eqsat.settings.Settings.as_dict)."""

    rules: list[str] = field(metadata=_doc("the --rules files, in order"))
    default_rules: bool = field(metadata=_doc("whether the default rules ran"))
    iter_limit: int = field(metadata=_doc("saturation rounds at most"))
    node_limit: int = field(metadata=_doc("e-nodes at most"))
    time_limit: float = field(metadata=_doc("seconds of saturation at most"))
    extractor: str = field(metadata=_doc("the extractor asked for"))
    extract_time_limit: float = field(metadata=_doc("seconds for the ILP extractor"))
    cost_model: str = field(metadata=_doc("the cost model asked for"))
    target: str = field(metadata=_doc("ort or onnx"))
    hardware: str = field(metadata=_doc("the hardware profile the --hardware asked for stands for here"))
    layout: str = field(metadata=_doc("the layout the rules may use"))
    dims: dict[str, int] = field(metadata=_doc("the bound symbolic dimensions"))
    fold_limit: int = field(metadata=_doc("the largest folded constant, in bytes"))
    explain: bool = field(metadata=_doc("whether --explain instrumented the rules"))
    choice: str | None = field(default=None, metadata=_doc("the --choice file decoded instead of extracting"))


@dataclass(frozen=True)
class Report(Section):
    """The report of one optimization (`eqsat optimize --report`; docs/report.md)."""

    version: int = field(default=REPORT_VERSION, kw_only=True, metadata=_doc(
        "the report format's version: it increases when a key is removed or changes meaning",
        const=REPORT_VERSION))
    nodes_before: int = field(metadata=_doc("nodes of the input's main graph"))
    nodes_after: int = field(metadata=_doc("nodes of the output's main graph"))
    ops_before: dict[str, int] = field(metadata=_doc("op (domain.op outside the default domain) -> count, input"))
    ops_after: dict[str, int] = field(metadata=_doc("op -> count, output"))
    opaque: dict[str, int] = field(metadata=_doc("op -> nodes carried opaque (no rule sees inside)"))
    target: str = field(metadata=_doc("ort or onnx (--target)"))
    hardware: str = field(metadata=_doc("the hardware profile used"))
    layout: str = field(metadata=_doc("the layout in effect (nchw where nchwc has no kernels)"))
    oracle: Oracle = field(metadata=_doc("constant folding and shape oracles"))
    settings: RunSettings = field(metadata=_doc("the options as the run resolved them (eqsat.settings)"))
    saturation: Saturation = field(metadata=_doc("equality saturation"))
    extraction: Extraction = field(metadata=_doc("the choice of the output program"))
    work: Work = field(metadata=_doc("the input's and the output's work"))
    times_s: dict[str, float] = field(metadata=_doc("phase -> seconds"))
    warnings: list[str] = field(metadata=_doc("warnings, as printed"))
    verification: Verification | None = field(default=None, metadata=_doc(
        "the comparison under onnxruntime (absent only from the pipeline's own report)"))
    requantization: Requantization | None = field(default=None, metadata=_doc(
        "a QDQ model's fusions left out after verification refused them (eqsat.core.requantize)"))
    plan: PlanSummary | None = field(default=None, metadata=_doc("the memory plan's summary, with --plan"))
    subgraphs: list[Subgraph] | None = field(default=None, metadata=_doc("the model's subgraphs, if it has any"))
    explain: dict[str, Any] | None = field(default=None, metadata=_doc(
        "with --explain: summary, rules, facts, nodes, constants, removed, removed_by, rules_removing, "
        "method (eqsat.core.explain)"))
    input: str | None = field(default=None, metadata=_doc("the input file (CLI only)"))
    output: str | None = field(default=None, metadata=_doc("the output file (CLI only)"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        """A report as written (tolerant of the optional keys' absence, and of a missing
        `version`: a report from before versioning). ValueError for a newer version or a
        missing required key."""
        version = d.get("version", REPORT_VERSION)
        if isinstance(version, int) and version > REPORT_VERSION:
            raise ValueError(f"report version {version} is newer than this eqsat reads ({REPORT_VERSION})")
        return _read(cls, d, "report")

    @property
    def data(self) -> dict[str, Any]:
        """The whole report as JSON-ready dicts (`as_dict()`)."""
        return self.as_dict()


# ---- conversions, driven by the type hints


def _fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.name != "extra"]


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional(hint: Any) -> tuple[Any, bool]:
    """(X, True) for `X | None`, else (hint, False)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _read(cls: type, d: dict[str, Any], where: str):
    if not isinstance(d, dict):
        raise ValueError(f"{where}: an object expected, not {type(d).__name__}")
    hints, kwargs = _hints(cls), {}
    for f in _fields(cls):
        if f.name in d:
            kwargs[f.name] = _convert(_optional(hints[f.name])[0], d[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where}: missing key {f.name!r}")
    known = {f.name for f in _fields(cls)}
    return cls(**kwargs, extra={k: v for k, v in d.items() if k not in known})


def _convert(hint: Any, value: Any, where: str) -> Any:
    """A JSON value read as `hint`: dataclasses built, containers copied, the rest as is."""
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _read(hint, value, where)
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(hint)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict and isinstance(value, dict):
        _, item = typing.get_args(hint)
        return {k: _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    return value


def _write(value: Any) -> Any:
    if isinstance(value, Section):
        return value.as_dict()
    if isinstance(value, list):
        return [_write(v) for v in value]
    if isinstance(value, dict):
        return {k: _write(v) for k, v in value.items()}
    return value


# ---- the JSON schema


_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean"}


def _schema_of(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one type hint; dataclasses go to `defs` and are referred to."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return {}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is Literal:
        return {**({"type": "string"} if all(isinstance(a, str) for a in args) else {}), "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _schema_of(args[0], defs)}
    if origin is dict:
        if args[0] is not str:
            raise TypeError(f"report: JSON object keys are strings, not {args[0]}")
        item = _schema_of(args[1], defs)
        return {"type": "object", **({"additionalProperties": item} if item else {})}
    if dataclasses.is_dataclass(hint):
        if hint.__name__ not in defs:
            defs[hint.__name__] = {}  # placeholder: a recursive type refers to itself
            defs[hint.__name__] = _object_schema(hint, defs)
        return {"$ref": f"#/$defs/{hint.__name__}"}
    raise TypeError(f"report: no JSON schema for the type {hint!r}")


def _object_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    """A dataclass's object: its fields' schemas, with their descriptions; those not
    optional required. Other keys are allowed (a newer writer's additions)."""
    hints, props, required = _hints(cls), {}, []
    for f in _fields(cls):
        hint, optional = _optional(hints[f.name])
        meta = dict(f.metadata)
        doc = meta.pop("doc", None)
        props[f.name] = {**({"description": doc} if doc else {}), **_schema_of(hint, defs), **meta}
        if not optional:
            required.append(f.name)
    return {"description": " ".join((cls.__doc__ or "").split()), "type": "object", "properties": props,
            "required": required}


def json_schema() -> dict[str, Any]:
    """The report's JSON schema (draft 2020-12), derived from the dataclasses' type hints."""
    defs: dict[str, Any] = {}
    top = _object_schema(Report, defs)
    return {"$schema": SCHEMA_DRAFT, "title": f"eqsat optimize report, version {REPORT_VERSION}",
            **top, "$defs": dict(sorted(defs.items()))}


def schema_text() -> str:
    """json_schema() as docs/report.schema.json holds it."""
    return json.dumps(json_schema(), indent=2) + "\n"


# ---- validation against the subset of JSON schema that json_schema() generates


_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}


def _is_type(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name != "boolean":
        return False  # JSON's true is no number
    return isinstance(value, _JSON_TYPES[name])


def validate(instance: Any, schema: dict[str, Any] | None = None) -> list[str]:
    """The ways `instance` breaks `schema` (default: json_schema()), as `path: problem`
    lines; empty when it conforms. Handles the keywords json_schema() uses: type, enum,
    const, properties, required, additionalProperties, items and local $ref."""
    schema = json_schema() if schema is None else schema
    errors: list[str] = []
    _check(instance, schema, schema, "$", errors)
    return errors


def _check(value: Any, s: dict[str, Any], root: dict[str, Any], path: str, errors: list[str]) -> None:
    if "$ref" in s:
        name = s["$ref"].removeprefix("#/$defs/")
        _check(value, root["$defs"][name], root, path, errors)
    if "type" in s and not _is_type(value, s["type"]):
        errors.append(f"{path}: {type(value).__name__} {value!r:.40}, not {s['type']}")
        return
    if "enum" in s and value not in s["enum"]:
        errors.append(f"{path}: {value!r} not one of {s['enum']}")
    if "const" in s and value != s["const"]:
        errors.append(f"{path}: {value!r}, not {s['const']!r}")
    if isinstance(value, list) and "items" in s:
        for i, v in enumerate(value):
            _check(v, s["items"], root, f"{path}[{i}]", errors)
    if isinstance(value, dict):
        errors += [f"{path}: missing key {k!r}" for k in s.get("required", ()) if k not in value]
        props, other = s.get("properties", {}), s.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                _check(v, props[k], root, f"{path}.{k}", errors)
            elif other is False:
                errors.append(f"{path}: unexpected key {k!r}")
            elif isinstance(other, dict):
                _check(v, other, root, f"{path}.{k}", errors)


if __name__ == "__main__":
    sys.stdout.write(schema_text())
