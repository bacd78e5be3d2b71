"""eqsat: an ONNX graph optimizer built on equality saturation.

    import eqsat
    r = eqsat.optimize("model.onnx")    # -> eqsat.Result: .model, .report, .plan
    r.save("model.opt.onnx")

`optimize`, `plan`, `verify` and `load_rules` are documented in eqsat.api and docs/python-api.md.
Names load on first use, so that `import eqsat` (and `eqsat --help`) imports neither onnx nor
egglog.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from eqsat.api import Result, load_rules, optimize
    from eqsat.api import verify_models as verify
    from eqsat.errors import EqsatError, InputError, OptimizeError, RuleError, UsageError
    from eqsat.report import Report

# name -> (module, attribute). `plan` is the eqsat.plan package itself, which is callable
# (eqsat.plan(model) is eqsat.api.plan): a function of that name would be replaced by the
# package as soon as any of its submodules is imported.
_EXPORTS = {
    "optimize": ("api", "optimize"), "verify": ("api", "verify_models"), "load_rules": ("api", "load_rules"),
    "Result": ("api", "Result"), "Report": ("report", "Report"),  # eqsat.api re-exports it
    "EqsatError": ("errors", "EqsatError"), "UsageError": ("errors", "UsageError"),
    "InputError": ("errors", "InputError"), "RuleError": ("errors", "RuleError"),
    "OptimizeError": ("errors", "OptimizeError"),
}

__all__ = ["EqsatError", "InputError", "OptimizeError", "Report", "Result", "RuleError", "UsageError",
           "__version__", "load_rules", "optimize", "plan", "verify"]


def __getattr__(name: str):
    """An exported name, imported from its module on first use."""
    if name == "plan":
        return importlib.import_module(".plan", __name__)
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    return getattr(importlib.import_module(f".{module}", __name__), attr)


def __dir__() -> list[str]:
    return sorted(__all__)
