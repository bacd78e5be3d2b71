"""The op language prelude (rules/lang.egg) and the Python op table agree."""

from __future__ import annotations

import onnx
import pytest
from egglog import bindings as b

from eqsat.core.rulefiles import PRELUDE, Declared, load_rule_file, rules_dir
from eqsat.lang.ops import BY_CTOR, SPECS, STRUCTURE_CTORS, prelude_disagreements


@pytest.fixture(scope="module")
def declared() -> Declared:
    d = Declared()
    load_rule_file(b.EGraph(), rules_dir() / PRELUDE, d)
    return d


def test_every_spec_has_a_constructor_with_its_signature(declared):
    for spec in SPECS:
        assert spec.ctor in declared.constructors, f"{spec.ctor} missing from rules/lang.egg"
        sort, args = declared.constructors[spec.ctor]
        assert sort == "Op"
        assert args == spec.arg_sorts(), f"{spec.ctor}: prelude {args} != table {spec.arg_sorts()}"


def test_every_op_constructor_has_a_spec(declared):
    op_ctors = {n for n, (sort, _) in declared.constructors.items() if sort == "Op"}
    assert op_ctors - STRUCTURE_CTORS == set(BY_CTOR)


def test_the_prelude_is_checked_against_the_table_as_it_loads(declared):
    """eqsat.core.saturate refuses to run on a prelude that disagrees with the op table, naming
    each difference; the shipped pair agrees."""
    assert prelude_disagreements(declared.constructors) == []
    broken = dict(declared.constructors)
    del broken["Relu"]
    broken["Gelu"] = ("Op", ["Op"])
    broken["Frobnicate"] = ("Op", ["Op"])
    assert prelude_disagreements(broken) == [
        "Frobnicate: declared in rules/lang.egg, missing from eqsat/lang/ops.py",
        "Relu: in eqsat/lang/ops.py, missing from rules/lang.egg",
        "Gelu: rules/lang.egg has arguments ['Op'], eqsat/lang/ops.py ['Op', 'String']",
    ]


def _ort_schemas() -> dict:
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    return {(s.domain, s.name): s for s in C.get_all_operator_schema()}


def schema_of(spec, ort_schemas):
    """ONNX's schema for a standard op; onnxruntime's for its contrib ops."""
    if spec.contrib:
        return ort_schemas[(spec.domain, spec.onnx_type)]
    return onnx.defs.get_schema(spec.onnx_type, domain=spec.domain)


def test_specs_match_the_op_schemas():
    ort_schemas = _ort_schemas()
    opt = onnx.defs.OpSchema.FormalParameterOption
    for spec in SPECS:
        names = [a.name for a in spec.attrs]
        assert names == sorted(names), f"{spec.ctor}: attributes must be in alphabetical order"
        schema = schema_of(spec, ort_schemas)
        for a in spec.attrs:
            assert a.name in schema.attributes, f"{spec.ctor}.{a.name} is not an attribute of the op"
        mark = {opt.Single: "", opt.Optional: "?", opt.Variadic: "*"}
        formal = [mark[i.option] for i in schema.inputs]
        assert [i[-1] if i[-1] in "?*" else "" for i in spec.inputs] == formal, f"{spec.ctor}: inputs"
        names = {i.name for i in schema.inputs}
        assert set(spec.legacy) <= names, f"{spec.ctor}: legacy inputs must use the op's input names"
        if spec.outputs:
            assert [o.rstrip("?") for o in spec.outputs] == [o.name for o in schema.outputs]


def test_contrib_defaults_are_onnxruntimes():
    """The decoder leaves out an attribute equal to its default: the defaults must be the
    runtime's, or leaving one out would change what the op computes."""
    ort_schemas = _ort_schemas()
    for spec in SPECS:
        if not spec.contrib:
            continue
        schema = ort_schemas[(spec.domain, spec.onnx_type)]
        for a in spec.attrs:
            raw = schema.attributes[a.name]._default_value
            p = onnx.AttributeProto()
            p.ParseFromString(raw)
            ort_default = onnx.helper.get_attribute_value(p) if p.name else None
            if isinstance(ort_default, bytes):
                ort_default = ort_default.decode()
            if a.kind in ("int", "float", "str"):
                assert a.default == pytest.approx(ort_default) if a.kind == "float" and a.default is not None \
                    else a.default == ort_default, f"{spec.ctor}.{a.name}: {a.default} vs onnxruntime {ort_default}"


def test_required_ops_are_typed():
    required = (
        "Conv BatchNormalization Relu Clip Sigmoid Add Sub Mul Div Pow Sqrt Erf Tanh MatMul Gemm "
        "Transpose Reshape Flatten Squeeze Unsqueeze Concat Split Slice Gather Cast Identity Dropout "
        "ReduceMean Softmax LayerNormalization Gelu MaxPool AveragePool GlobalAveragePool "
        "ConstantOfShape Shape Expand Where If"
    ).split()
    assert not [op for op in required if op not in BY_CTOR]


def test_loading_rules_refuses_a_prelude_the_table_disagrees_with(monkeypatch):
    from eqsat.core import saturate
    from eqsat.errors import RuleError

    monkeypatch.delitem(BY_CTOR, "Relu")
    with pytest.raises(RuleError, match=r"lang\.egg and the op table disagree .*Relu: declared in rules/lang\.egg"):
        saturate._load([], default_rules=False)
