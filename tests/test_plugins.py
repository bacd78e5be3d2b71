"""Extractors and cost models from installed packages (entry points, extract/plugins.py).

Each test installs a package the way pip leaves one (a module and its .dist-info with
entry_points.txt) in a folder on PYTHONPATH, and runs the command line in a fresh process,
as a user who installed it would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from eqsat.demo import build_model

from .conftest import assert_same_outputs

PLUGIN = '''
from eqsat.extract import Extraction, Extractor, check, dag_cost, tree_cost
from eqsat.extract.costs import CostModel
from eqsat.extract.tree_greedy import TreeGreedy


class FirstNode(Extractor):
    name = "first-node"

    def extract(self, egraph, cost):
        class Order(CostModel):
            def node_cost(self, g, node):
                return 1.0 + g.classes[node.eclass].index(node.id)

        choice = TreeGreedy().extract(egraph, Order()).choice
        check(egraph, choice)
        costs = cost.costs(egraph)
        return Extraction(choice, self.name, tree_cost(egraph, choice, costs), dag_cost(egraph, choice, costs))


class Uniform(CostModel):
    name = "uniform"

    def node_cost(self, egraph, node):
        return 1.0


class Misnamed(Uniform):
    name = "something-else"


class NotAModel:
    name = "not-a-model"


class Raising(CostModel):
    name = "raising"

    def node_cost(self, egraph, node):
        raise RuntimeError("lookup table not loaded")


class Negative(CostModel):
    name = "negative"

    def node_cost(self, egraph, node):
        return -1.0


class OneArg(CostModel):
    name = "one-arg"

    def __init__(self, hardware):
        self.hardware = hardware

    def node_cost(self, egraph, node):
        return 1.0


class LyingCost(FirstNode):
    name = "lying-cost"

    def extract(self, egraph, cost):
        ex = super().extract(egraph, cost)
        return Extraction(ex.choice, self.name, 0.0, -5.0)


class ReturnsNone(Extractor):
    name = "returns-none"

    def extract(self, egraph, cost):
        return None
'''


def install(site: Path, module: str, source: str, entry_points: str) -> None:
    """What `pip install` leaves for a package `module` 0.1: the module and its metadata."""
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(source)
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


def eqsat(site: Path, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-m", "eqsat", *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.fixture
def model_path(tmp_path) -> Path:
    p = tmp_path / "model.onnx"
    onnx.save(build_model(), str(p))
    return p


def test_an_installed_extractor_and_cost_model_run_by_name(tmp_path, model_path):
    site = tmp_path / "site"
    install(site, "mine", PLUGIN, "[eqsat.extractors]\nfirst-node = mine:FirstNode\n\n"
                                  "[eqsat.cost_models]\nuniform = mine:Uniform\n")
    out, rep = tmp_path / "o.onnx", tmp_path / "r.json"
    p = eqsat(site, "optimize", model_path, "-o", out, "--extractor", "first-node", "--cost-model", "uniform",
              "--report", rep, "-q")
    assert p.returncode == 0, p.stderr
    ex = json.loads(rep.read_text())["extraction"]
    assert (ex["extractor"], ex["cost_model"]) == ("first-node", "uniform")
    assert ex["dag_cost"] > 0  # every chosen node costs 1 under Uniform
    assert_same_outputs(onnx.load(str(model_path)), onnx.load(str(out)), dims={"batch": 3}, rtol=1e-5, atol=1e-6)
    # without the package on the path the names are unknown, and the error lists what there is
    p = subprocess.run([sys.executable, "-m", "eqsat", "optimize", str(model_path), "--extractor", "first-node"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert "unknown extractor 'first-node'; choose one of tree-greedy, dag-greedy, ilp, ilp-fixed-layouts" in p.stderr


def test_an_extractors_own_cost_figures_are_not_taken_on_trust(tmp_path, model_path):
    # a plugin reported DAG cost -5 for a choice that costs what it costs: the report and
    # `eqsat extract` printed it
    site = tmp_path / "site"
    install(site, "mine", PLUGIN, "[eqsat.extractors]\nlying-cost = mine:LyingCost\nfirst-node = mine:FirstNode\n")
    rep = tmp_path / "r.json"
    p = eqsat(site, "optimize", model_path, "-o", tmp_path / "o.onnx", "--extractor", "lying-cost", "--report", rep,
              "-q")
    assert p.returncode == 0, p.stderr
    lying = json.loads(rep.read_text())["extraction"]
    p = eqsat(site, "optimize", model_path, "-o", tmp_path / "o.onnx", "--extractor", "first-node", "--report", rep,
              "-q")
    honest = json.loads(rep.read_text())["extraction"]
    assert (lying["dag_cost"], lying["tree_cost"]) == (honest["dag_cost"],
                                                       honest["tree_cost"]) and honest["dag_cost"] > 0
    assert lying["notes"] == [f"extractor lying-cost reported DAG cost -5 and tree cost 0; the choice's own under "
                              f"roofline: {honest['dag_cost']:g} and {honest['tree_cost']:g} (reported here)"]
    assert honest["notes"] == []


def test_an_unknown_name_lists_the_installed_plugins_too(tmp_path, model_path):
    site = tmp_path / "site"
    install(site, "mine", PLUGIN, "[eqsat.extractors]\nfirst-node = mine:FirstNode\n")
    p = eqsat(site, "optimize", model_path, "--extractor", "fist-node")
    assert p.returncode == 2
    assert ("unknown extractor 'fist-node'; choose one of tree-greedy, dag-greedy, ilp, ilp-fixed-layouts, "
            "first-node") in p.stderr


@pytest.mark.parametrize("entry, says", [
    ("uniform = mine_missing:Uniform",
     "eqsat.cost_models entry point 'uniform' = 'mine_missing:Uniform' of package mine 0.1 failed to load "
     "(ModuleNotFoundError: No module named 'mine_missing'); fix or uninstall that package"),
    ("not-a-model = mine:NotAModel",
     "eqsat.cost_models entry point 'not-a-model' = 'mine:NotAModel' of package mine 0.1 is not a subclass of "
     "eqsat.extract.costs.base.CostModel"),
    ("uniform = mine:Misnamed",
     "eqsat.cost_models entry point 'uniform' = 'mine:Misnamed' of package mine 0.1: the class's name is "
     "'something-else'; make it 'uniform', the entry point's name, which reports record"),
])
def test_a_broken_plugin_is_one_line_naming_its_package(tmp_path, model_path, entry, says):
    site = tmp_path / "site"
    install(site, "mine", PLUGIN, f"[eqsat.cost_models]\n{entry}\n")
    name = entry.split(" = ")[0]
    p = eqsat(site, "optimize", model_path, "--cost-model", name, "-o", tmp_path / "o.onnx")
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines()[-1] == f"eqsat: error: {says}"
    assert not (tmp_path / "o.onnx").exists()
    # a broken plugin breaks only the commands that ask for it
    p = eqsat(site, "optimize", model_path, "-o", tmp_path / "o.onnx", "-q")
    assert p.returncode == 0, p.stderr


def test_a_shipped_name_is_never_taken_by_a_plugin(tmp_path, model_path):
    site = tmp_path / "site"
    install(site, "mine", PLUGIN.replace('name = "uniform"', 'name = "node-count"'),
            "[eqsat.cost_models]\nnode-count = mine:Uniform\n")
    costs = []
    for path in (site, tmp_path / "nothing-installed"):
        rep = tmp_path / "r.json"
        p = eqsat(path, "optimize", model_path, "-o", tmp_path / "o.onnx", "--report", rep, "-q")
        assert p.returncode == 0, p.stderr
        costs.append(json.loads(rep.read_text())["extraction"]["dag_cost"])
    assert costs[0] == costs[1]  # Uniform's would count every chosen node, attributes included, as 1


@pytest.mark.parametrize("args, code, says", [
    (["--cost-model", "raising"], 1,
     "extraction failed: RuntimeError: lookup table not loaded (in mine.Raising)"),
    (["--cost-model", "negative"], 1, "extraction failed: cost model negative: node "),
    (["--extractor", "returns-none"], 1,
     "extraction failed: extractor returns-none returned NoneType, not an extract.Extraction"),
    (["--cost-model", "one-arg"], 2,
     "cost model one-arg (mine.OneArg) could not be built: TypeError: "),
])
def test_a_plugin_that_breaks_its_contract_is_one_line_naming_it(tmp_path, model_path, args, code, says):
    site = tmp_path / "site"
    install(site, "mine", PLUGIN, "[eqsat.cost_models]\nraising = mine:Raising\nnegative = mine:Negative\n"
                                  "one-arg = mine:OneArg\n\n[eqsat.extractors]\nreturns-none = mine:ReturnsNone\n")
    p = eqsat(site, "optimize", model_path, "-o", tmp_path / "o.onnx", *args)
    assert p.returncode == code, p.stderr
    assert "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"eqsat: error: {says}")
    assert not (tmp_path / "o.onnx").exists()


def test_a_name_two_packages_declare_is_an_error_naming_both(tmp_path, model_path):
    site = tmp_path / "site"
    install(site, "mine", PLUGIN, "[eqsat.cost_models]\nuniform = mine:Uniform\n")
    install(site, "yours", PLUGIN, "[eqsat.cost_models]\nuniform = yours:Uniform\n")
    p = eqsat(site, "optimize", model_path, "--cost-model", "uniform", "-o", tmp_path / "o.onnx")
    assert p.returncode == 2
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith("eqsat: error: eqsat.cost_models: 2 installed packages declare 'uniform' (")
    assert "'mine:Uniform' of package mine 0.1" in line and "'yours:Uniform' of package yours 0.1" in line
    assert line.endswith("); uninstall all but one")
