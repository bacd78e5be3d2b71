"""The learned cost model (extract/costs/learned.py) and `eqsat calibrate --learn`: the fit
recovers known weights, the evaluation's regret on a hand-made table, a profile without
weights or with broken ones refused with what to do, and the whole loop: compare-costs saves
a program set with features, calibrate --learn fits it, optimize extracts with the result."""

from __future__ import annotations

import json
import random

import numpy as np
import onnx
import pytest

from eqsat.extract.costs import CostModelError, Hardware
from eqsat.extract.costs.learned import Learned, evaluate, fit, predict
from eqsat.extract.features import FEATURE_NAMES

from .conftest import one_error, run_cli
from .test_compare_costs import fake_timer, model_file  # noqa: F401 - fixtures

pytest.importorskip("onnxruntime")


def test_fit_recovers_the_weights_of_linear_timings():
    rng = random.Random(3)
    truth = [1.0, 2.0, 0.5, 30.0, 0.0, 12.0, 4.0, 1.5, 80.0, 20.0]
    rows = []
    for _ in range(40):
        x = [rng.uniform(0, 5) if rng.random() < 0.8 else 0.0 for _ in FEATURE_NAMES]
        rows.append((x, sum(w * xi for w, xi in zip(truth, x, strict=True))))
    w = fit(rows)
    assert all(v >= 0 for v in w)
    assert np.allclose(w, truth, rtol=1e-6, atol=1e-9)
    score = evaluate([predict(w, x) for x, _ in rows], [t for _, t in rows])
    assert score["tau"] > 0.99 and score["top1_regret"] == 0.0


def test_evaluate_regret_is_the_picks_slowdown_over_the_fastest():
    score = evaluate(predicted=[1.0, 2.0, 3.0], measured=[1.1, 1.0, 3.0])
    assert score["top1_regret"] == pytest.approx(0.1)
    assert score["tau"] == pytest.approx(1 / 3)


def test_a_profile_without_weights_says_how_to_fit_them():
    with pytest.raises(CostModelError, match="calibrate --learn"):
        Learned("cpu")


def test_broken_weights_are_refused(tmp_path):
    from eqsat.extract.costs.roofline import HARDWARE_DIR

    prof = json.loads((HARDWARE_DIR / "cpu.json").read_text())
    prof["learned"] = {"features": list(FEATURE_NAMES), "weights_us": [-1.0] + [0.0] * (len(FEATURE_NAMES) - 1)}
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(prof))
    with pytest.raises(CostModelError, match=">= 0"):
        Learned(str(p))


def test_calibrate_learn_refuses_a_set_without_features(capsys, tmp_path):
    s = tmp_path / "old.json"
    s.write_text(json.dumps({"format": 1, "what": "eqsat compare-costs program set", "egraph_digest": "x",
                             "programs": [{"choice": {}, "samples_ms": [1.0]}]}))
    rc, _, err = run_cli(capsys, "calibrate", "--learn", s, "-o", tmp_path / "p.json")
    assert rc != 0 and "holds no features" in one_error(err) and "--save-programs" in err


def test_learn_loop_compare_costs_calibrate_optimize(capsys, model_file, tmp_path, fake_timer):  # noqa: F811
    """Timings proportional to node count (fake_timer): the fitted model ranks the programs as
    measured, and optimize with it writes a model whose outputs match the input's."""
    import onnxruntime as ort

    sets = tmp_path / "set.json"
    rc, _, err = run_cli(capsys, "compare-costs", model_file, "--samples", "8", "--runs", "3", "-q",
                         "--save-programs", sets)
    assert rc == 0, err
    data = json.loads(sets.read_text())
    assert data["feature_names"] == list(FEATURE_NAMES)
    assert all(len(p["features"]) == len(FEATURE_NAMES) for p in data["programs"])
    prof = tmp_path / "mine.json"
    rc, out, err = run_cli(capsys, "calibrate", "--learn", sets, "--hold-out", sets, "-o", prof)
    assert rc == 0, err
    learned = json.loads(prof.read_text())["learned"]
    assert learned["base_profile"] == data["settings"]["hardware"]  # the profile the set was measured with
    assert learned["held_out"][0]["tau"] > 0.7 and learned["held_out"][0]["top1_regret"] < 0.02, learned
    Hardware.load(str(prof))  # a valid profile
    out_model = tmp_path / "o.onnx"
    rc, _, err = run_cli(capsys, "optimize", model_file, "-o", out_model, "--hardware", prof,
                         "--cost-model", "learned", "-q")
    assert rc == 0, err
    onnx.checker.check_model(onnx.load(str(out_model)))
    rng = np.random.default_rng(0)
    src = onnx.load(str(model_file))
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in src.graph.input}
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    a = ort.InferenceSession(str(model_file), opts).run(None, feeds)
    b = ort.InferenceSession(str(out_model), opts).run(None, feeds)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def test_sets_of_two_profiles_are_not_fitted_together(capsys, tmp_path):
    sets = []
    for k, hw in enumerate(("cpu", "cpu-avx2")):
        s = tmp_path / f"{k}.json"
        s.write_text(json.dumps({"format": 1, "what": "eqsat compare-costs program set", "egraph_digest": "x",
                                 "settings": {"hardware": hw}, "feature_names": list(FEATURE_NAMES),
                                 "programs": [{"choice": {}, "samples_ms": [1.0],
                                               "features": [1.0] * len(FEATURE_NAMES)}]}))
        sets.append(s)
    rc, _, err = run_cli(capsys, "calibrate", "--learn", *sets, "-o", tmp_path / "p.json")
    assert rc != 0 and "different hardware profiles (cpu, cpu-avx2)" in one_error(err)
