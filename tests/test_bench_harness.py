"""benchmarks/peers.py on one tiny model with eqsat and onnxruntime-extended: the records'
fields, the cache, RESULTS.md. Needs only the base install (+ onnxruntime); no timing asserted."""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parent.parent


def _bench(name: str):
    """benchmarks/NAME.py as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


peers = _bench("peers")

TOOLS = ["eqsat", "ort-extended"]


def tiny_model(path: Path) -> Path:
    """x[batch, 8] -> MatMul + Add -> Identity -> Relu -> MatMul: something to fuse and remove."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Identity", ["h1"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "w2"], ["y"]),
    ]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w1, b1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def args(tmp: Path) -> argparse.Namespace:
    return argparse.Namespace(out=tmp / "out", runs=3, warmup=1, max_s=5.0, settings=["off", "all"], mem_budget=1.0,
                              timeout=300.0, force=False, keep_models=False, children=2)


def test_dims_and_missing(tmp_path):
    m = onnx.load(str(tiny_model(tmp_path / "tiny.onnx")))
    assert peers.dims_for(m) == {"batch": 1}
    # a KV-cache step (corpus.py's *-kv): one new token after 128 cached, total = past + new
    vi = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "new_tokens"]),
          helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total_sequence"]),
          helper.make_tensor_value_info("past.0.key", TensorProto.FLOAT, ["batch", 2, "past_sequence", 8])]
    kv = helper.make_model(helper.make_graph([], "kv", vi, []))
    assert peers.dims_for(kv) == {"batch": 1, "new_tokens": 1, "total_sequence": 129, "past_sequence": 128}
    assert peers.missing("eqsat") is None and peers.missing("ort-extended") is None
    assert "unknown tool" in peers.missing("no-such-tool")


def test_harness_records(tmp_path):
    src = tiny_model(tmp_path / "tiny.onnx")
    a = args(tmp_path)
    recs = peers.bench_model(src, TOOLS, a)
    assert set(recs) == set(TOOLS)
    for tool, r in recs.items():
        assert r["model"] == "tiny" and r["tool"] == tool
        assert r["ok"], r.get("error")
        assert r["nodes_before"] == 5
        assert isinstance(r["nodes"], int) and 0 < r["nodes"] <= 5
        assert r["opt_s"] >= 0 and r["io_s"] >= 0
        assert r["dims"] == {"batch": 1}
        assert r["equivalence"]["status"] in ("identical", "close"), r["equivalence"]
        for setting in ("off", "all"):
            lat = r["latency"][setting]
            assert "error" not in lat, lat
            assert set(lat) >= {"median_ms", "original_ms", "ratio", "paired_ratio", "runs", "ci95", "samples_ms"}
            assert lat["runs"] == 3 and lat["ratio"] > 0
            assert 0 < lat["ci95"][0] <= lat["ci95"][1]
            assert ([len(c) for c in lat["samples_ms"][tool]] == [2, 1]
                    == [len(c) for c in lat["samples_ms"]["original"]])
            assert set(lat["group"]) == set(TOOLS)  # one round-robin: pairable
        assert not Path(r["result"]).exists()  # the optimized model is deleted once measured
        assert (a.out / "tiny" / f"{tool}.json").exists()
    x = recs["eqsat"]["eqsat"]
    assert x["stop_reason"] and set(x["phases_s"]) >= {"encode", "saturate", "extract", "decode"}
    assert x["plan"]["arena_bytes"] >= x["plan"]["lower_bound_bytes"] > 0
    assert recs["eqsat"]["nodes"] < 5  # Identity removed, MatMul+Add fused

    # cached: a rerun measures nothing again
    again = peers.bench_model(src, TOOLS, a)
    for tool in TOOLS:
        assert again[tool]["child_s"] == recs[tool]["child_s"]
        assert again[tool]["latency"] == recs[tool]["latency"]

    out = tmp_path / "RESULTS.md"
    peers.write_results(peers.load_all(a.out), out, "python benchmarks/peers.py --only tiny", [], "")
    text = out.read_text()
    assert "| tiny |" in text and "eqsat" in text and "ort-extended" in text
    assert "Latency ratio, onnxruntime optimizations off" in text
    assert "eqsat's ratios with 95 % intervals" in text
    lo, hi = recs["eqsat"]["latency"]["off"]["ci95"]
    assert f"{recs['eqsat']['latency']['off']['ratio']:.2f} [{lo:.2f}, {hi:.2f}] | - |" in text  # no ort-all here
    lo, hi = peers.pair_interval(recs["eqsat"], recs["ort-extended"], "off")  # measured in the same rounds
    assert 0 < lo <= hi


def test_failed_tool_is_a_record(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    out = peers.run_child({"kind": "optimize", "tool": "ort-extended", "src": str(bad), "dst": str(tmp_path / "o.onnx"),
                           "dims": {}}, timeout=120)
    assert "error" in out and out["error"]
    assert json.dumps(out)


def test_peers_uses_the_checkouts_round_sampler():
    """One sampler for the harness and eqsat.backends.ort.latency: peers loads eqsat/backends/ort/rounds.py by path."""
    assert Path(peers.round_orders.__code__.co_filename) == ROOT / "eqsat" / "backends" / "ort" / "rounds.py"


def test_bootstrap_ratio_interval():
    """Rounds with a result 10 % slower than the original (with noise common to both in each
    round): the interval holds 1.1 and not 1.0; the original against itself gives [1, 1];
    two samples of one distribution give an interval around 1.0."""
    rng = np.random.default_rng(1)
    drift = [rng.uniform(0.9, 1.3, 40) for _ in range(2)]  # per-round load, shared by both sessions
    den = [list(100 * d * rng.normal(1, 0.01, 40)) for d in drift]
    num = [list(110 * d * rng.normal(1, 0.01, 40)) for d in drift]
    lo, hi = peers.bootstrap_ratio(num, den)
    assert lo < 1.1 < hi and lo > 1.0
    assert peers.bootstrap_ratio(den, den) == (1.0, 1.0)
    same = [list(100 * d * rng.normal(1, 0.01, 40)) for d in drift]
    lo, hi = peers.bootstrap_ratio(same, den)
    assert lo < 1.0 < hi and hi - lo < 0.2


def test_bootstrap_interval_sees_the_children_differ():
    """Four children whose result runs 4 % apart from one child to the next (where each
    process placed the sessions), with little noise within a child: resampling the children
    widens the interval past the within-child spread, and it holds the pooled ratio."""
    rng = np.random.default_rng(2)
    den = [list(100 * rng.normal(1, 0.002, 20)) for _ in range(4)]
    num = [list(100 * f * rng.normal(1, 0.002, 20)) for f in (0.98, 1.02, 0.99, 1.03)]
    lo, hi = peers.bootstrap_ratio(num, den)
    pooled = np.median(np.concatenate(num)) / np.median(np.concatenate(den))
    assert lo <= pooled <= hi and hi - lo > 0.02
    one = peers.bootstrap_ratio(num[:1], den[:1])  # one child: only its rounds' spread
    assert one[1] - one[0] < 0.01


def test_latency_groups_keep_eqsat_and_ort_all_together():
    """VGG-19's sessions fit three to a child: eqsat, ort-all and the control go first, so
    that eqsat / ort-all has a paired interval; every tool is measured once."""
    groups = peers.latency_groups(list(peers.TOOLS), 3)
    assert groups[0] == ["eqsat", "ort-all", "control"]
    assert sorted(t for g in groups for t in g) == sorted(peers.TOOLS) and all(len(g) <= 3 for g in groups)
    assert peers.latency_groups(["ort-extended", "eqsat"], 1) == [["eqsat"], ["ort-extended"]]


def test_opt_time_interleaves_tools_and_reports_ratios(tmp_path):
    """benchmarks/opt_time.py: every tool timed once a round in a child; the first tool is the
    reference (ratio 1); the markdown has a row per tool."""
    opt_time = _bench("opt_time")
    src = tiny_model(tmp_path / "tiny.onnx")
    times = opt_time.time_rounds(src, ["eqsat", "control"], rounds=2, timeout=300)
    assert [len(v) for v in times.values()] == [2, 2]
    assert all(t > 0 for t in times["eqsat"])
    rows = opt_time.summarize(times)
    assert [r["tool"] for r in rows] == ["eqsat", "control"]
    assert rows[0]["ratio"] == 1.0 and rows[0]["paired_ratio"] == 1.0
    assert rows[1]["ratio"] == pytest.approx(statistics.median(times["control"]) / statistics.median(times["eqsat"]))
    out = tmp_path / "opt_time.md"
    opt_time.write({"tiny": rows}, out, "python benchmarks/opt_time.py --only tiny")
    text = out.read_text()
    assert "| tiny | eqsat | 2 |" in text and "| tiny | control | 2 |" in text


def test_ab_pairs_every_model_with_the_first(tmp_path, capsys):
    """benchmarks/ab.py: each model's ratio to the original from the children's pooled samples,
    and each later model against the first, paired in the same rounds; a NAME=PATH that is not
    a file is refused before anything runs. No timing asserted."""
    ab = _bench("ab")
    src = tiny_model(tmp_path / "tiny.onnx")
    res = ab.measure(src, {"old": src, "new": src}, setting="off", children=2, runs=4)
    assert res["dims"] == {"batch": 1}
    assert set(res["models"]) == {"old", "new"} and set(res["pairs"]) == {"new"}
    old = res["models"]["old"]
    assert [len(c) for c in old["samples_ms"]["old"]] == [2, 2]  # 4 rounds shared by 2 children
    pooled = [t for c in old["samples_ms"]["old"] for t in c]
    assert old["median_ms"] == pytest.approx(statistics.median(pooled))
    ratio, lo, hi = res["pairs"]["new"]
    new = [t for c in res["models"]["new"]["samples_ms"]["new"] for t in c]
    assert ratio == pytest.approx(statistics.median(new) / statistics.median(pooled))
    assert 0 < lo <= hi
    assert ab.main([str(src), f"a={src}", f"b={src}", "--setting", "off", "--children", "1", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "optimizations off" in out and "b/a: " in out
    with pytest.raises(SystemExit):
        ab.main([str(src), f"a={tmp_path / 'missing.onnx'}"])


def test_explain_page_reports_what_the_explanation_says(tmp_path):
    """benchmarks/explain_report.py: the page's summary and per-rule table are the
    explanation's own, one section per op type that rules built, both paths timed."""
    from eqsat.core.pipeline import Options, optimize
    from eqsat.demo import build_model

    mod = _bench("explain_report")
    src = tmp_path / "demo.onnx"
    onnx.save(build_model(), str(src))
    text = mod.page(src, runs=1)
    ex = optimize(build_model(), Options(explain=True)).report["explain"]
    s = ex["summary"]
    assert f"-> {s['nodes_after']} nodes" in text and f"{s['original_nodes_replaced']} original nodes were" in text
    for rule, k in ex["rules"].items():
        assert f"| `{rule}` | {k} |" in text
    built = {e["op"] for e in ex["nodes"] if e["status"] == "rewritten" and e["replaced"]}
    assert built and all(f"## `{op}`" in text for op in built)
    assert "| total |" in text and "| explain | - |" in text  # the plain path has no explain phase


def _op_profile():
    return _bench("op_profile")


def test_op_profile_counts_product_flops_from_shapes():
    op_profile = _op_profile()
    # [2, 3] x [3, 5]: 2 * 10 * 3; Gemm with transA reads K from A's first dim
    assert op_profile.product_flops("MatMul", [[2, 3], [3, 5]], [2, 5], 0) == 60
    assert op_profile.product_flops("Gemm", [[3, 2], [3, 5]], [2, 5], 1) == 60
    assert op_profile.product_flops("FusedMatMul", [[4, 7, 2], [4, 7, 5]], [4, 2, 5], 1) == 2 * 40 * 7


def test_op_profile_of_a_tiny_model(tmp_path):
    """Both the original and eqsat's result of the tiny model run 384 FLOPs of products a run
    (MatMul [1, 8] x [8, 16] and [1, 16] x [16, 4]), however onnxruntime and eqsat fuse them."""
    op_profile = _op_profile()
    src = tiny_model(tmp_path / "tiny.onnx")
    dst = tmp_path / "tiny.eqsat.onnx"
    op_profile._optimize(src, dst)
    for setting in ("off", "all"):
        work = tmp_path / setting
        work.mkdir()
        res = op_profile.profile_pair(src, dst, {"batch": 1}, setting, 4, work)
        for name in ("original", "eqsat"):
            r = res[name]
            assert abs(r["products_gflop"] * 1e9 - 384) < 1e-6, (setting, name, r)
            assert 0 < r["products_ms"] <= r["total_ms"]
        # the original, unoptimized: MatMul, Add, Identity, Relu, MatMul once each a run
        if setting == "off":
            assert {op: c["count"] for op, c in res["original"]["ops"].items()} == {
                "MatMul": 2, "Add": 1, "Identity": 1, "Relu": 1}
    text = op_profile.report({"tiny": res}, "all", 4, 50.0, "python benchmarks/op_profile.py --only tiny")
    assert "| tiny |" in text and "| MatMul |" in text


def _product_variants():
    return _bench("product_variants")


def _merged_qkv_model() -> onnx.ModelProto:
    """x[batch, seq, 8] -> MatMul [8, 12] + bias -> Split [4, 4, 4] on the last axis (GPT-2's
    c_attn), and a second MatMul + bias on the first part."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 12)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(12).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([4, 4, 4], np.int64), "sizes"),
             numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b2")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Split", ["a", "sizes"], ["q", "k", "v"], axis=2),
             helper.make_node("MatMul", ["q", "w2"], ["m2"]), helper.make_node("Add", ["b2", "m2"], ["y"])]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", d])
          for n, d in (("x", 8), ("k", 4), ("v", 4), ("y", 6))]
    g = helper.make_graph(nodes, "qkv", [vi[0]], vi[1:], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


GEMM = ["Shape", "Concat", "Reshape", "Gemm", "Reshape"]


@pytest.mark.parametrize("variant, rewritten, ops", [
    ("split", 1, ["MatMul", "Add", "MatMul", "Add", "MatMul", "Add", "MatMul", "Add"]),
    ("gemm", 2, [*GEMM, "Split", *GEMM]),
])
def test_product_variants_compute_the_same(variant, rewritten, ops):
    import onnxruntime as rt

    pv = _product_variants()
    original = _merged_qkv_model()
    model = _merged_qkv_model()
    assert pv.VARIANTS[variant](model) == (rewritten, 0)
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ops
    x = np.random.default_rng(2).standard_normal((2, 3, 8)).astype(np.float32)
    want = rt.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = rt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_split_variant_sees_ranks_through_contrib_ops_and_keeps_a_broadcast_bias():
    """The Split's rank comes from running the model (onnx's inference loses every shape after a
    com.microsoft op); a bias of one element broadcast over the product is not split; a
    weight still read elsewhere stays."""
    pv = _product_variants()
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 12)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(12).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal(1).astype(np.float32), "b1"),
             numpy_helper.from_array(np.array([4, 8], np.int64), "sizes")]
    nodes = [helper.make_node("FusedMatMul", ["x", "x2"], ["f"], domain="com.microsoft", alpha=1.0),
             helper.make_node("MatMul", ["f", "w"], ["m"]), helper.make_node("Add", ["b", "m"], ["a"]),
             helper.make_node("Split", ["a", "sizes"], ["p", "q"], axis=2),
             helper.make_node("MatMul", ["f", "w"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Split", ["a1", "sizes"], ["r", "t"], axis=2)]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8]),
           helper.make_tensor_value_info("x2", TensorProto.FLOAT, [8, 8])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("p", "q", "r", "t")]
    model = helper.make_model(helper.make_graph(nodes, "g", ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    assert pv.split_merged(model) == (1, 0)  # the Add(b, MatMul) one; not the broadcast bias
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Split") == 1 and ops.count("MatMul") == 3
    assert {"w", "b1"} <= {t.name for t in model.graph.initializer}  # w: the second product reads it
    assert "b" not in {t.name for t in model.graph.initializer}


def test_op_profile_reads_k_through_trans_batch_a():
    # FusedMatMul transBatchA on A [4, 7, 2]: A is taken as [7, 4, 2]; K is 2, or 4 with transA
    op_profile = _op_profile()
    assert op_profile.product_flops("FusedMatMul", [[4, 7, 2], [7, 2, 5]], [7, 4, 5], 0, 1) == 2 * 140 * 2
    assert op_profile.product_flops("FusedMatMul", [[4, 7, 2], [7, 4, 5]], [7, 2, 5], 1, 1) == 2 * 70 * 4


def test_kv_total_follows_past_and_new_tokens_unless_given():
    from benchmarks.symdims import kv_total

    dims = {"batch": 1, "new_tokens": 4, "past_sequence": 256, "total_sequence": 129}
    assert kv_total(dims)["total_sequence"] == 260
    assert kv_total(dims, {"total_sequence"})["total_sequence"] == 129
    assert kv_total({"batch": 1, "sequence": 128}) == {"batch": 1, "sequence": 128}


def test_cli_time_table_reports_medians_and_the_ratio_to_the_first_revision():
    ct = _bench("cli_time")
    runs = lambda *walls: [{"wall_s": w, "user_s": w / 2, "sys_s": 1.0, "rss_mib": 100 * w} for w in walls]  # noqa: E731
    rows = ct.table({"m": {"aaa": runs(10, 40, 30), "bbb": runs(12, 15, 9)}})
    assert rows[2].split(" | ")[1:4] == ["aaa", "3", "30.00"] and rows[2].endswith("| 3000 | 1.00 |")
    assert rows[3].split(" | ")[1:4] == ["bbb", "3", "12.00"] and rows[3].endswith("| 1200 | 0.40 |")


def test_decode_attention_forms_give_the_same_outputs_and_cache():
    from eqsat.verification import compare, run

    plain, fused, feeds = _bench("decode_attention").step_models(past=8)
    assert [n.op_type for n in fused.graph.node] == ["MultiHeadAttention"]
    a, b = run(plain, feeds), run(fused, feeds)
    assert a["present_k"].shape == (1, 12, 9, 64) and not compare(a, b, 1e-5, 1e-6)


def test_cli_time_refuses_one_commit_named_twice():
    ct = _bench("cli_time")
    with pytest.raises(SystemExit, match="the same commit twice"):
        ct.measure([], ["HEAD", "HEAD~0"], rounds=1, out_dir=None)


def test_decoders_counts_fused_ops_per_layer_and_writes_the_tables(tmp_path):
    """benchmarks/decoders.py: fused ops counted by kind, layers by past.N.key inputs, and
    the page's latency, fused-op and verification rows from a record (no optimizing, no timing)."""
    dec = _bench("decoders")
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        [helper.make_node("SkipLayerNormalization", ["x", "x", "g"], ["y"], domain="com.microsoft"),
         helper.make_node("MultiHeadAttention", ["y", "past.0.key", "past.0.value"], ["z"], domain="com.microsoft",
                          num_heads=1)],
        "dec", [vi("x", TensorProto.FLOAT, [1, 2, 4]), vi("past.0.key", TensorProto.FLOAT, [1, 2, 4]),
                vi("past.0.value", TensorProto.FLOAT, [1, 2, 4])],
        [vi("z", TensorProto.FLOAT, [1, 2, 4])], [numpy_helper.from_array(np.ones(4, np.float32), "g")])
    path = tmp_path / "dec.onnx"
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(g, opset_imports=opsets), path)
    assert dec.layers(onnx.load(str(path))) == 1
    counts = dec.fused_counts(path)
    assert counts["nodes"] == 2 and counts["fused"]["attention"] == 1 and counts["fused"]["skip-LN"] == 1
    tool = {"ok": True, **counts, "verify": {"prefill": {"status": "passed"}, "step": {"status": "failed"}}}
    lat = {"median_ms": 1.0, "original_ms": 2.0, "ratio": 0.5, "ci95": [0.4, 0.6], "runs": 4}
    rec = {"model": "dec-kv", "layers": 1, "original": counts, "tools": {t: tool for t in dec.TOOLS},
           "latency": {"step/off": {"tools": {t: lat for t in dec.TOOLS},
                                    "pairs": {"eqsat/tf-opt": [0.9, 0.8, 1.0]}}}}
    md = dec.write_md([rec], "python benchmarks/decoders.py", argparse.Namespace(children=2, runs=4))
    assert "| dec-kv | step | off | 2.00 | 0.50 [0.40, 0.60] |" in md
    assert "| 0.90 [0.80, 1.00] |" in md
    assert "| dec-kv | 1 | eqsat | 2 | 1 (1/layer) | 0 | 1 (1/layer) |" in md
    assert "| dec-kv | eqsat | passed | failed |" in md


def test_cli_time_runs_each_revision_with_its_own_rules_and_extractors(tmp_path):
    # the editable install maps eqsat.extract and eqsat.rules to this checkout: a revision
    # run from its archive took this checkout's extractors and rules with its own eqsat, and
    # verification's child process this checkout's eqsat
    ct = _bench("cli_time")
    import shutil

    src, site = tmp_path / "rev", tmp_path / "site"
    site.mkdir()
    for part in ("eqsat", "extract", "rules"):
        shutil.copytree(ROOT / part, src / part)
    probe = ("import eqsat.extract, eqsat.extract.hardware as hw; from eqsat.core.rulefiles import rules_dir; "
             "print(eqsat.__file__, eqsat.extract.__file__, list(hw.__path__)[0], rules_dir(), sep='\\n')")
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {probe!r}], check=True)"
    out = subprocess.run([sys.executable, "-c", child], cwd=tmp_path, env=ct.child_env(src, site),
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(out) == 4 and all(line.startswith(str(src)) for line in out), out


@pytest.mark.no_egglog
def test_ort_all_programs_counts_kernels_by_fused_activation_inputs_and_grouping():
    """benchmarks/ort_all_programs.py: two programs differ where a kernel's activation, inputs
    or grouping does, though their op lists are the same."""
    progs = _bench("ort_all_programs")
    text = """<ir_version: 8, opset_import: ["" : 17, "com.microsoft.nchwc" : 1]>
        g (float[1, 8, 4, 4] x, float[8, 8, 1, 1] w, float[8, 1, 3, 3] d) => (float[1, 8, 4, 4] y) {
            a = com.microsoft.nchwc.Conv <activation = "Relu"> (x, w)
            b = com.microsoft.nchwc.Conv <group = 8, pads = [1, 1, 1, 1]> (a, d)
            y = com.microsoft.nchwc.Conv (b, w, , a)
        }"""
    m = onnx.parser.parse_model(text)
    sig = progs.signature(m)
    assert sig[("com.microsoft.nchwc", "Conv", "Relu", 2, False)] == 1
    assert sig[("com.microsoft.nchwc", "Conv", "", 2, True)] == 1
    assert sig[("com.microsoft.nchwc", "Conv", "", 3, False)] == 1  # the Sum input, the bias left out
    lines = progs.rows({"tv_resnet18": {"exit": 0, "ort": 3, "eqsat": 3, "diff": {}},
                        "tv_mnasnet0_5": {"exit": 0, "ort": 3, "eqsat": 2,
                                          "diff": {("com.microsoft.nchwc", "ReorderOutput", "", 1, False): (2, 1)}}})
    assert "| tv_resnet18 | held-out | 3 | 3 | yes |" in lines[2]
    assert lines[3].endswith("| no | nchwc:ReorderOutput/1 2 -> 1 |")
