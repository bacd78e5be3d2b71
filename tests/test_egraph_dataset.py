"""benchmarks/egraph_dataset.py on two small models: both written in eqsat's and gym's
format, indexed with checksums and splits, the gym file loadable by eqsat's gym reader, a
second run keeping what exists, a partial run (--split) keeping the other models' entries, and
--programs adding a program set beside e-graph files it keeps."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import onnx

from .conftest import parse_model

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "mlp": """<ir_version: 8, opset_import: ["": 17]>
g (float[N, 8] x, float[8, 8] w, float[8] b) => (float[N, 8] y) {
 a = MatMul(x, w)
 c = Add(a, b)
 y = Relu(c) }""",
    # named as a held-out torchvision model: the index must say so
    "tv_mnasnet0_5": """<ir_version: 8, opset_import: ["": 17]>
g (float[1, 8, 6, 6] im, float[8, 8, 3, 3] k) => (float[1, 8, 4, 4] o) {
 p = Conv(im, k)
 o = Relu(p) }""",
}


def _run(models: Path, out: Path, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "egraph_dataset.py"), "--models", str(models),
                           "--out", str(out), *more], capture_output=True, text=True, timeout=600)


def test_dataset_of_two_models(tmp_path):
    from eqsat.backends.ort import program_set
    from eqsat.extract import EGraph
    from eqsat.extract.check import check
    from eqsat.extract.costs import FileCosts
    from eqsat.extract.dag_greedy import DagGreedy

    models = tmp_path / "models"
    models.mkdir()
    for name, text in MODELS.items():
        onnx.save(parse_model(text), str(models / f"{name}.onnx"))
    out = tmp_path / "ds"
    r = _run(models, out)
    assert r.returncode == 0, r.stderr
    index = json.loads((out / "index.json").read_text())
    by = {e["name"]: e for e in index["models"]}
    assert set(by) == set(MODELS) and all(e["status"] == "ok" for e in by.values())
    assert by["tv_mnasnet0_5"]["split"] == "held-out" and by["mlp"]["split"] == "corpus"
    assert by["mlp"]["dims"] == {"N": 1}
    assert by["mlp"]["generator"] == "benchmarks/corpus.py"
    assert by["tv_mnasnet0_5"]["generator"] == "benchmarks/torchvision_models.py"
    for e in by.values():
        for f in e["files"].values():
            assert hashlib.sha256((out / f["path"]).read_bytes()).hexdigest() == f["sha256"]
        assert set(e["files"]) == {"egraph", "gym", "report"}
        eg = EGraph.from_json(out / e["files"]["egraph"]["path"])
        saved = json.loads((out / e["files"]["egraph"]["path"]).read_text())  # the file's counts, primitives too
        assert eg.roots and e["egraph"]["e_nodes"] == len(saved["nodes"]) >= e["gym"]["e_nodes"]
        assert e["egraph"]["e_classes"] >= e["gym"]["e_classes"] > 0
        raw = json.loads((out / e["files"]["gym"]["path"]).read_text())
        assert raw["nodes"] and raw["root_eclasses"]
        assert e["eqsat_commit"] == index["made_with"]["eqsat_commit"] and not e.get("skipped")
        gym = EGraph.from_json(out / e["files"]["gym"]["path"])
        assert gym.roots and e["gym"]["e_nodes"] == len(gym.nodes) and not gym.meta
        check(gym, DagGreedy().extract(gym, FileCosts()).choice)  # a valid program under the file's costs
    assert index["made_with"]["egglog"]
    stamp = {p.name: p.stat().st_mtime_ns for p in out.glob("*.json") if p.name != "index.json"}
    r = _run(models, out, "--split", "held-out")
    assert r.returncode == 0, r.stderr
    assert stamp == {p.name: p.stat().st_mtime_ns for p in out.glob("*.json") if p.name != "index.json"}
    again = {e["name"]: e for e in json.loads((out / "index.json").read_text())["models"]}
    assert again["mlp"] == by["mlp"]  # outside the run: its entry kept as it was
    assert again["tv_mnasnet0_5"]["skipped"] and again["tv_mnasnet0_5"]["seconds"] == by["tv_mnasnet0_5"]["seconds"]
    assert again["tv_mnasnet0_5"]["files"] == by["tv_mnasnet0_5"]["files"]

    # --programs on a model already there: its program set added, its e-graph files kept
    r = _run(models, out, "--only", "mlp", "--programs", "3", "--runs", "2")
    assert r.returncode == 0, r.stderr
    assert stamp == {p.name: p.stat().st_mtime_ns for p in out.glob("*.json")
                     if p.name != "index.json" and not p.name.endswith(".programs.json")}
    mlp = {e["name"]: e for e in json.loads((out / "index.json").read_text())["models"]}["mlp"]
    f = mlp["files"]["programs"]
    assert hashlib.sha256((out / f["path"]).read_bytes()).hexdigest() == f["sha256"]
    ps = program_set.read(out / f["path"])
    assert len(ps["programs"]) >= 1 and all(p["samples_ms"] and p["choice"] for p in ps["programs"])
