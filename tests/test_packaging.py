"""The distribution ships every package of the source tree (a non-editable install would
otherwise miss a folder added later)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    installed_as = {"eqsat": "eqsat", "extract": "eqsat.extract"}  # extract/ installs as eqsat.extract
    found = {".".join((installed_as[top], *p.parent.relative_to(ROOT / top).parts))
             for top in installed_as for p in (ROOT / top).rglob("__init__.py")}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert not {p for p in listed if p.split(".")[0] != "eqsat"}, "every package installs under eqsat"
    assert cfg["package-dir"]["eqsat.rules"] == "rules"
    assert cfg["package-dir"]["eqsat.extract"] == "extract"
    assert sorted((ROOT / "rules").glob("*.egg")), "the default rules ship as package data"
