"""compare-costs' ground truth: distinct valid sampled programs, regret on a hand-made table,
the run's record (machine, versions, commit, seed), program sets saved and reused, and a
fixed seed giving the same programs. The timer is replaced where only bookkeeping is tested."""

from __future__ import annotations

import json

import onnx
import pytest

from .conftest import one_error, parse_model, run_cli

pytest.importorskip("onnxruntime")

MODEL = """<ir_version: 8, opset_import: ["": 17]>
g (float[4, 8] x, float[8, 8] w, float[8] bias, float[1, 8, 6, 6] im, float[8, 8, 3, 3] k)
  => (float[4, 8] y, float[1, 8, 4, 4] o) {
 a = MatMul(x, w)
 b = Add(a, bias)
 c = Relu(b)
 d = MatMul(c, w)
 y = Add(d, bias)
 p = Conv(im, k)
 o = Relu(p) }"""  # Gemm fusions and the NCHWc layout: a dozen programs


@pytest.fixture
def model_file(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(parse_model(MODEL), str(p))
    return p


@pytest.fixture
def fake_timer(monkeypatch):
    """Each program's runs made up from its node count (no onnxruntime timing)."""
    import eqsat.backends.ort.latency as latency

    def samples(models, feeds, runs=30, **kw):
        return [[0.01 * len(m.graph.node) + 0.001 * (r % 3) + 0.0001 * k for r in range(runs)]
                for k, m in enumerate(models)]

    monkeypatch.setattr(latency, "compare_to_first_samples", samples)


def _saturated(model_file):
    from eqsat.core.pipeline import saturate
    from eqsat.settings import Options

    return saturate(onnx.load(str(model_file)), Options(), measure=False)


def test_sampled_programs_are_distinct_and_pass_the_checker(model_file):
    from eqsat.backends.ort import program_sample
    from eqsat.extract.check import check

    eg = _saturated(model_file).egraph
    ok = program_sample.allowed(eg, [])
    start = program_sample.build(eg, ok, __import__("random").Random(1))
    progs, kinds, note = program_sample.sample(eg, ok, 6, 0, [start], lambda s: start)
    assert len({frozenset(p.items()) for p in progs}) == len(progs)
    assert len(progs) >= 7 or note.startswith("the e-graph has only"), note
    assert kinds[0] == "chosen" and set(kinds[1:]) <= {"uniform", "walk", "mutation", "perturbed"}
    for p in progs:
        check(eg, p)
    assert {"uniform", "walk", "mutation"} <= set(kinds)


def test_too_few_programs_says_how_many_there_are(tmp_path):
    from eqsat.backends.ort import program_sample
    from eqsat.extract.check import check

    p = tmp_path / "one.onnx"
    onnx.save(parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[2, 4] x) => (float[2, 4] y) { y = Relu(x) }"""), str(p))
    eg = _saturated(p).egraph
    ok = program_sample.allowed(eg, [])
    every = program_sample.enumerate_all(eg, ok)
    progs, _, note = program_sample.sample(eg, ok, 50, 0, [], lambda s: every[0])
    assert note == f"the e-graph has only {len(every)} distinct programs" and len(progs) == len(every)
    for q in progs:
        check(eg, q)


def test_regret_on_a_hand_made_table():
    from eqsat.backends.ort.compare_stats import mean_abs_error, median_interval, top_k_regret

    predicted = [5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0]
    measured = [1.0, 1.5, 1.2, 2.0, 1.1, 3.0, 0.9]  # the fastest (0.9) is predicted worst
    # top-1: predicted 1.0 -> 1.5 ms; 1.5 / 0.9 - 1
    assert top_k_regret(predicted, measured, 1) == pytest.approx(0.6 / 0.9)
    # top-5: predicted 1, 2, 3, 4, 5 -> 1.5, 2.0, 1.2, 1.1, 1.0: best 1.0; 1.0 / 0.9 - 1
    assert top_k_regret(predicted, measured, 5) == pytest.approx(0.1 / 0.9)
    assert top_k_regret(predicted, measured, 7) == 0.0
    # two programs tied at the lowest prediction, 2.0 and 1.0 ms: either, half the time: 1.5 / 1.0 - 1
    assert top_k_regret([1.0, 1.0, 2.0], [2.0, 1.0, 3.0], 1) == pytest.approx(0.5)
    # us against ms: |1000 us - 0.5 ms| and |2000 us - 2.5 ms|: 0.5 ms each
    assert mean_abs_error([1000.0, 2000.0], [0.5, 2.5], "us") == pytest.approx(0.5)
    assert mean_abs_error([3.0, 4.0], [0.5, 2.5], "ops") is None
    assert median_interval(list(range(30))) == (9.0, 20.0)  # the 10th and 21st of 30
    assert median_interval([1.0, 2.0, 3.0]) is None


def test_near_best_programs_are_those_within_ten_percent_of_the_fastest(capsys, model_file, tmp_path, fake_timer):
    from eqsat.backends.ort.compare_stats import near_best

    assert near_best([1.0, 1.1, 1.11, 0.95, 2.0]) == [0, 3]  # within 1.045 of 0.95
    assert near_best([2.0, 2.2, 2.3]) == [0, 1] and near_best([]) == []
    out = tmp_path / "c.json"
    rc, text, err = _run(capsys, model_file, "--samples", "6", "--json", out)
    assert rc == 0, err
    data = json.loads(out.read_text())
    measured = [p["measured_ms"] for p in data["programs"]]
    near = near_best(measured)
    for row in data["cost_models"]:
        assert row["near_programs"] == len(near)
        if len(near) < 2:
            assert row["kendall_tau_near"] is None
    assert "tau near" in text.splitlines()[1]


def _run(capsys, model_file, *more):
    return run_cli(capsys, "compare-costs", model_file, "-q", "--runs", "3", "--cost-model", "roofline",
                   "--cost-model", "node-count", *more)


def test_json_records_machine_versions_commit_seed_and_samples(capsys, model_file, tmp_path, fake_timer):
    out = tmp_path / "c.json"
    rc, text, err = _run(capsys, model_file, "--samples", "4", "--seed", "7", "--json", out)
    assert rc == 0, err
    data = json.loads(out.read_text())
    assert data["machine"]["cpu"] and data["machine"]["cores"] >= 1 and "nchwc_block" in data["machine"]
    assert data["software"]["onnxruntime"] and data["software"]["eqsat"]
    assert "commit" in data["software"]
    assert data["settings"]["seed"] == 7 and data["settings"]["runs"] == 3 and data["settings"]["samples"] == 4
    assert all(len(p["samples_ms"]) == 3 for p in data["programs"])
    assert data["noise_floor"]["ratio"] > 0 and len(data["noise_floor"]["samples_ms"]) == 3
    rows = {r["cost_model"]: r for r in data["cost_models"]}
    assert rows["node-count"]["mae_ms"] is None and rows["roofline"]["mae_ms"] is not None
    assert rows["roofline"]["top1_regret"] >= 0 and rows["roofline"]["top5_regret"] <= rows["roofline"]["top1_regret"]
    assert "top-1" in text and "noise floor" in text


def test_a_fixed_seed_gives_the_same_programs(capsys, model_file, tmp_path, fake_timer):
    sets = []
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        rc, _, err = _run(capsys, model_file, "--samples", "5", "--seed", seed, "--save-programs", tmp_path / name)
        assert rc == 0, err
        sets.append([(p["kind"], p["choice"]) for p in json.loads((tmp_path / name).read_text())["programs"]])
    assert sets[0] == sets[1]
    assert len(sets[0]) >= 5


def test_saved_programs_rescored_without_timing_give_the_same_scores(capsys, model_file, tmp_path, fake_timer):
    saved, first, again = tmp_path / "p.json", tmp_path / "a.json", tmp_path / "b.json"
    rc, _, err = _run(capsys, model_file, "--samples", "5", "--save-programs", saved, "--json", first)
    assert rc == 0, err
    assert json.loads(saved.read_text())["egraph_digest"]

    import eqsat.backends.ort.latency as latency

    def no_timing(*a, **k):
        raise AssertionError("timed with --no-time")

    latency.compare_to_first_samples = no_timing  # restored by fake_timer's monkeypatch
    rc, text, err = _run(capsys, model_file, "--programs", saved, "--no-time", "--json", again)
    assert rc == 0, err
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    assert b["cost_models"] == a["cost_models"]
    assert [p["samples_ms"] for p in b["programs"]] == [p["samples_ms"] for p in a["programs"]]
    assert "scored against their stored timings" in text


def test_a_program_set_from_another_egraph_is_refused(capsys, model_file, tmp_path, fake_timer):
    saved = tmp_path / "p.json"
    rc, _, err = _run(capsys, model_file, "--samples", "2", "--save-programs", saved)
    assert rc == 0, err
    other = tmp_path / "other.onnx"
    onnx.save(parse_model(MODEL.replace("o = Relu(p)", "o = Sigmoid(p)")), str(other))
    rc, out, err = _run(capsys, other, "--programs", saved, "--no-time")
    line = one_error(err)
    assert rc == 2 and out == ""
    assert line.startswith(f"eqsat: error: {saved}: this program set cannot be used here: the choice was made on "
                           "another e-graph"), line
    rc, _, err = _run(capsys, model_file, "--no-time")
    assert rc == 2 and "--no-time scores the cost models against stored timings" in err


def test_a_saved_e_graph_scores_a_program_set_as_the_model_does(capsys, model_file, tmp_path, fake_timer):
    """compare-costs SAVED.json --programs SET --no-time: the same scores as on the model, with
    nothing saturated or timed (the researcher's loop: a new cost model on old measurements)."""
    saved, graph, first, again = (tmp_path / n for n in ("p.json", "g.json", "a.json", "b.json"))
    rc, _, err = _run(capsys, model_file, "--samples", "5", "--save-programs", saved, "--save-egraph", graph,
                      "--json", first)
    assert rc == 0, err

    import eqsat.backends.ort.compare_costs as cc
    import eqsat.backends.ort.latency as latency

    def forbidden(*a, **k):
        raise AssertionError("saturated or timed from a saved e-graph")

    latency.compare_to_first_samples = forbidden  # restored by fake_timer's monkeypatch
    saturate, cc.saturate = cc.saturate, forbidden
    try:
        rc, text, err = _run(capsys, graph, "--programs", saved, "--no-time", "--json", again)
    finally:
        cc.saturate = saturate
    assert rc == 0, err
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    assert [r["cost_model"] for r in b["cost_models"]] == [r["cost_model"] for r in a["cost_models"]]
    for ra, rb in zip(a["cost_models"], b["cost_models"], strict=True):
        keys = ("predicted", "kendall_tau", "kendall_tau_95", "top1_regret", "top5_regret")
        assert [rb[k] for k in keys] == [ra[k] for k in keys], rb["cost_model"]
    assert "scored against their stored timings" in text


def test_a_saved_e_graph_without_stored_timings_is_refused(capsys, model_file, tmp_path, fake_timer):
    graph = tmp_path / "g.json"
    rc, _, err = _run(capsys, model_file, "--samples", "2", "--save-egraph", graph)
    assert rc == 0, err
    rc, out, err = _run(capsys, graph)
    line = one_error(err)
    assert rc == 2 and out == ""
    assert "a saved e-graph holds no weights, so its programs cannot be timed: give --programs SET --no-time" in line


def test_a_saved_e_graph_is_priced_at_a_named_profile(capsys, model_file, tmp_path, fake_timer):
    """--hardware given with a saved e-graph prices it at that profile (a learned or
    calibrated one, say), not the one it was saturated for; the run's record says which."""
    saved, graph, out = tmp_path / "p.json", tmp_path / "g.json", tmp_path / "c.json"
    rc, _, err = _run(capsys, model_file, "--samples", "3", "--save-programs", saved, "--save-egraph", graph)
    assert rc == 0, err
    prof = tmp_path / "slow.json"
    prof.write_text(json.dumps({"name": "slow", "matmul_gflops": 0.5, "vector_gflops": 0.1, "mem_gbps": 0.2,
                                "kernel_overhead_us": 50.0}))
    rc, _, err = _run(capsys, graph, "--programs", saved, "--no-time", "--hardware", prof, "--json", out)
    assert rc == 0, err
    data = json.loads(out.read_text())
    assert data["settings"]["hardware"] == str(prof)
    rc, _, err = _run(capsys, graph, "--programs", saved, "--no-time", "--json", tmp_path / "d.json")
    assert rc == 0, err
    roof = {r["cost_model"]: r["predicted"] for r in json.loads((tmp_path / "d.json").read_text())["cost_models"]}
    slow = {r["cost_model"]: r["predicted"] for r in data["cost_models"]}
    assert slow["roofline"] > roof["roofline"]


def test_repeats_time_every_program_again_in_new_groups_and_pool_the_samples(capsys, model_file, tmp_path,
                                                                             monkeypatch):
    """--repeats 3: three timings of every program, each with the programs after the first in
    another order; each program's samples pooled (3 x runs), each repeat's median kept, and the
    repeat ceiling printed and recorded."""
    import eqsat.backends.ort.latency as latency

    calls = []

    def samples(models, feeds, runs=30, **kw):
        calls.append(([id(m) for m in models], kw.get("clock")))
        return [[0.01 * len(m.graph.node) + 0.0001 * k for _ in range(runs)] for k, m in enumerate(models)]

    monkeypatch.setattr(latency, "compare_to_first_samples", samples)
    out = tmp_path / "c.json"
    rc, text, err = _run(capsys, model_file, "--samples", "6", "--repeats", "3", "--json", out)
    assert rc == 0, err
    data = json.loads(out.read_text())
    n = len(data["programs"])
    assert len(calls) == 3 and {c for _, c in calls} == {"cpu"}
    assert len({tuple(ids) for ids, _ in calls}) == 3  # the programs grouped in three orders
    assert all(ids[0] == ids[-1] for ids, _ in calls)  # the first, and again last, in each
    assert all(len(p["samples_ms"]) == 9 for p in data["programs"])
    noise = data["noise_floor"]
    assert noise["repeats"] == 3 and len(noise["repeat_medians_ms"]) == n
    assert all(len(r) == 3 for r in noise["repeat_medians_ms"])
    assert set(noise["repeat_ceiling"]) == {"tau", "tau_near", "near"}
    assert data["settings"]["repeats"] == 3 and data["settings"]["clock"] == "cpu"
    assert "repeat ceiling: 3 repeats" in text


def test_the_repeat_ceiling_is_the_tau_between_even_and_odd_repeats():
    from eqsat.backends.ort.compare_costs import repeat_ceiling

    agree = [[1.0, 1.0], [1.02, 1.03], [1.05, 1.04], [2.0, 2.1]]
    assert repeat_ceiling(agree) == {"tau": 1.0, "tau_near": 1.0, "near": 3}
    # the near-best three in opposite orders on the two halves, the slow one apart
    swapped = [[1.00, 1.06], [1.03, 1.03], [1.06, 1.00], [2.0, 2.0]]
    c = repeat_ceiling(swapped)
    assert c["tau_near"] == -1.0 and c["near"] == 3
    assert c["tau"] == 0.0  # three pairs discordant, the three with the slow one concordant
