"""Settings are resolved once, before any model is read, and each stage receives them:
the hardware profile and the cost model are made once per run, nested subgraphs included;
the Settings are immutable and recorded in the report; the CLI's defaults are Options'."""

from __future__ import annotations

import dataclasses

import pytest

import eqsat.backends.ort.target as target
import eqsat.extract.costs as costs
from eqsat.cli.main import build_parser
from eqsat.core.pipeline import optimize
from eqsat.errors import UsageError
from eqsat.limits import Limits
from eqsat.settings import Options, Settings, resolve

from .conftest import parse_model

# an If whose branches are optimized as models of their own, nested runs of the pipeline
MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 3] x, bool c) => (float[2, 3] y) {
    r = Relu(x)
    y = If(c) <then_branch = t () => (float[2, 3] a) { a1 = Relu(r)  a = Relu(a1) },
                else_branch = e () => (float[2, 3] b) { b = Identity(r) }>
}
"""


def _counting(monkeypatch, module, name) -> list:
    calls = []
    real = getattr(module, name)

    def counted(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_profile_and_cost_model_are_made_once_per_run_subgraphs_included(monkeypatch):
    profiles = _counting(monkeypatch, target, "hardware_profile")
    models = _counting(monkeypatch, costs, "make_cost_model")
    res = optimize(parse_model(MODEL), Options())
    assert res.report["subgraphs"], "the If's branches were optimized as models of their own"
    assert (len(profiles), len(models)) == (1, 1)


def test_settings_are_immutable_and_resolve_is_idempotent():
    s = resolve(Options(dims={"batch": 2}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.target = "onnx"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.limits.iter_limit = 1  # type: ignore[misc]
    s.dims["batch"] = 3  # a copy: the settings keep theirs
    assert s.dims == {"batch": 2}
    assert resolve(s) is s


def test_the_report_records_the_settings():
    s = resolve(Options(limits=Limits(iter_limit=7), dims={"n": 4}))
    report = optimize(parse_model(MODEL), s).report
    assert report["settings"] == s.as_dict()
    assert report["settings"]["iter_limit"] == 7 and report["settings"]["dims"] == {"n": 4}
    assert report["settings"]["hardware"] == report["hardware"] and report["settings"]["layout"] == report["layout"]


@pytest.mark.parametrize(("field", "value", "says"), [
    ("target", "tpu", "unknown target 'tpu'"),
    ("extractor", "magic", "magic"),
    ("cost_model", "vibes", "vibes"),
    ("hardware", "no-such-profile", "no-such-profile"),
])
def test_a_bad_option_fails_as_it_resolves(field, value, says):
    with pytest.raises(UsageError, match=says):
        resolve(Options(**{field: value}))


def test_the_cli_defaults_are_the_options_defaults():
    args = build_parser().parse_args(["optimize", "m.onnx"])
    o, lim = Options(), Limits()
    assert (args.extractor, args.extract_time_limit, args.cost_model, args.target, args.hardware, args.layout,
            args.fold_limit) == (o.extractor, o.extract_time_limit, o.cost_model, o.target, o.hardware, o.layout,
                                 o.fold_limit)
    assert (args.iter_limit, args.node_limit, args.time_limit) == (lim.iter_limit, lim.node_limit, lim.time_limit)


def test_settings_name_every_option():
    assert {f.name for f in dataclasses.fields(Options)} <= {f.name for f in dataclasses.fields(Settings)} | {"dims"}
