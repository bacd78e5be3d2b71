"""What an optimization run is asked for (`Options`, mutable, as the CLI and the API fill it
in) and what it resolves to (`Settings`, immutable), once, before any model is read.

Contract of `resolve(opts)`: every choice that needs no model is made and checked here: the
extractor's class, the hardware profile `opts.hardware` stands for on this machine, the
layout the rules may use, the cost model built on that profile. An unknown extractor, cost
model, target or hardware profile is a UsageError. Each stage then receives the Settings
and reads them; none of them looks an option up again, and the report records
`Settings.as_dict()`. `resolve(settings)` returns `settings` itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from eqsat.errors import UsageError
from eqsat.extract.costs import DEFAULT as COST_MODEL_DEFAULT
from eqsat.extract.registry import DEFAULT as EXTRACTOR_DEFAULT
from eqsat.limits import Limits

FOLD_LIMIT = 1 << 20  # bytes: larger folded constants only where no larger than their inputs
EXTRACT_TIME_LIMIT = 60.0  # seconds; the ILP falls back to the greedy answer past it
TARGET_DEFAULT = "ort"
HARDWARE_DEFAULT = "cpu"  # the shipped CPU profile of this machine's vector width
LAYOUT_DEFAULT = "nchwc"  # also onnxruntime's channel-blocked CPU layout where it has it; nchw: not


@dataclass
class Options:
    """The options of one run, as given: the CLI's flags and the API's keywords, with the
    same defaults (defined above, once)."""

    rule_files: list[Path] = field(default_factory=list)
    default_rules: bool = True
    limits: Limits = field(default_factory=Limits)
    extractor: str = EXTRACTOR_DEFAULT
    extract_time_limit: float = EXTRACT_TIME_LIMIT
    cost_model: str = COST_MODEL_DEFAULT
    target: str = TARGET_DEFAULT
    hardware: str = HARDWARE_DEFAULT  # a shipped profile's name or a profile file
    dims: dict[str, int] = field(default_factory=dict)  # sizes of symbolic dimensions, by name
    fold_limit: int = FOLD_LIMIT
    save_egraph: Path | None = None
    explain: bool = False  # instrumented rules; the report gets an `explain` section (eqsat.core.explain)
    layout: str = LAYOUT_DEFAULT
    choice: Path | None = None  # a choice file (extract/choice_file.py) decoded instead of extracting


@dataclass(frozen=True)
class Settings:
    """Options resolved on this machine (`resolve`); immutable. `hardware` is the profile
    asked for, `profile` the one it stands for here (eqsat.backends.ort.target.hardware_profile);
    `layout` is the layout asked for, `effective_layout` the one the rules may use;
    `cost` is the cost model, built once on `profile`."""

    rule_files: tuple[Path, ...]
    default_rules: bool
    limits: Limits
    extractor: str
    extract_time_limit: float
    cost_model: str
    target: str
    hardware: str
    profile: Any  # a profile name, a profile file, or a Hardware object
    layout: str
    effective_layout: str
    dim_items: tuple[tuple[str, int], ...]
    fold_limit: int
    save_egraph: Path | None
    explain: bool
    choice: Path | None
    cost: Any = field(compare=False, repr=False)  # eqsat.extract.costs.CostModel

    @property
    def dims(self) -> dict[str, int]:
        """The bound symbolic dimensions, as a fresh dict."""
        return dict(self.dim_items)

    @property
    def profile_id(self) -> str:
        """The profile as the report and a saved e-graph name it."""
        from eqsat.backends.ort.target import profile_id

        return profile_id(self.profile)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: what the report records (eqsat.report.RunSettings; `choice` only when given)."""
        return {"rules": [str(f) for f in self.rule_files], "default_rules": self.default_rules,
                "iter_limit": self.limits.iter_limit, "node_limit": self.limits.node_limit,
                "time_limit": self.limits.time_limit, "extractor": self.extractor,
                "extract_time_limit": self.extract_time_limit, "cost_model": self.cost_model,
                "target": self.target, "hardware": self.profile_id, "layout": self.effective_layout,
                "dims": self.dims, "fold_limit": self.fold_limit, "explain": self.explain,
                **({"choice": str(self.choice)} if self.choice else {})}

    def with_cost_model(self, name: str) -> Settings:
        """The same settings with another cost model (compare-costs, eqsat extract)."""
        return resolve(Options(**{**_options_of(self), "cost_model": name}))


def _options_of(s: Settings) -> dict[str, Any]:
    keep = {f.name for f in fields(Options)} - {"rule_files", "dims"}
    return {**{k: getattr(s, k) for k in keep}, "rule_files": list(s.rule_files), "dims": s.dims}


def make_cost(name: str, profile: Any, dims: dict[str, int]):
    """The named cost model on `profile`; an unknown name or profile is a UsageError."""
    from eqsat.extract import PluginError
    from eqsat.extract.costs import HardwareProfileError, make_cost_model

    try:
        return make_cost_model(name, profile, dims)
    except (FileNotFoundError, KeyError, HardwareProfileError, PluginError) as e:
        raise UsageError(str(e).strip("'\"")) from None


def check_extractor(name: str) -> type:
    """The extractor class of that name (registered or an installed plugin's); a name there
    is none of, or a broken plugin, is a UsageError."""
    from eqsat.extract import PluginError, extractor_class

    try:
        return extractor_class(name)
    except (KeyError, PluginError) as e:
        raise UsageError(str(e).strip("'\"")) from None


def resolve(opts: Options | Settings) -> Settings:
    """`opts` resolved on this machine (the module's contract); Settings are returned as they are."""
    if isinstance(opts, Settings):
        return opts
    from eqsat.backends.ort.target import TARGETS, effective_layout, hardware_profile

    if opts.target not in TARGETS:
        raise UsageError(f"unknown target {opts.target!r}; choose one of {', '.join(TARGETS)}")
    check_extractor(opts.extractor)
    profile = hardware_profile(opts.hardware)
    dims = dict(opts.dims)
    return Settings(
        rule_files=tuple(Path(f) for f in opts.rule_files), default_rules=opts.default_rules, limits=opts.limits,
        extractor=opts.extractor, extract_time_limit=opts.extract_time_limit, cost_model=opts.cost_model,
        target=opts.target, hardware=opts.hardware, profile=profile, layout=opts.layout,
        effective_layout=effective_layout(opts.target, opts.layout), dim_items=tuple(dims.items()),
        fold_limit=opts.fold_limit, save_egraph=opts.save_egraph, explain=opts.explain, choice=opts.choice,
        cost=make_cost(opts.cost_model, profile, dims))
