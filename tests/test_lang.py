"""The op language prelude (rules/lang.egg) and the Python op table agree."""

from __future__ import annotations

import onnx
import pytest
from egglog import bindings as b

from eqsat.lang.ops import BY_CTOR, SPECS
from eqsat.rulefiles import PRELUDE, Declared, load_rule_file, rules_dir

STRUCTURE = {"Input", "Const", "Ints", "ScalarF", "ScalarI", "Absent", "Out", "Opaque"}


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
    assert op_ctors - STRUCTURE == set(BY_CTOR)


def test_attributes_are_alphabetical_and_exist_in_onnx():
    for spec in SPECS:
        names = [a.name for a in spec.attrs]
        assert names == sorted(names), f"{spec.ctor}: attributes must be in alphabetical order"
        schema = onnx.defs.get_schema(spec.onnx_type, domain=spec.domain)
        for a in spec.attrs:
            assert a.name in schema.attributes, f"{spec.ctor}.{a.name} is not an ONNX attribute"
        opt = onnx.defs.OpSchema.FormalParameterOption
        mark = {opt.Single: "", opt.Optional: "?", opt.Variadic: "*"}
        formal = [mark[i.option] for i in schema.inputs]
        assert [i[-1] if i[-1] in "?*" else "" for i in spec.inputs] == formal, f"{spec.ctor}: inputs"
        names = {i.name for i in schema.inputs}
        assert set(spec.legacy) <= names, f"{spec.ctor}: legacy inputs must use ONNX input names"


def test_required_ops_are_typed():
    required = (
        "Conv BatchNormalization Relu Clip Sigmoid Add Sub Mul Div Pow Sqrt Erf Tanh MatMul Gemm "
        "Transpose Reshape Flatten Squeeze Unsqueeze Concat Split Slice Gather Cast Identity Dropout "
        "ReduceMean Softmax LayerNormalization Gelu MaxPool AveragePool GlobalAveragePool "
        "ConstantOfShape Shape Expand Where If"
    ).split()
    assert not [op for op in required if op not in BY_CTOR]
