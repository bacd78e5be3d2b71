"""Extractors and cost models from installed packages (entry points).

A package offers its own by declaring entry points, the name being what `--extractor` or
`--cost-model` takes and the object a class:

    [project.entry-points."eqsat.extractors"]
    first-node = "mine:FirstNode"          # a subclass of extract.Extractor

    [project.entry-points."eqsat.cost_models"]
    uniform = "mine:Uniform"               # a subclass of extract.costs.CostModel

Contract: a plugin is imported only when its name is asked for, so a broken package breaks
only the commands that use it; its class's `name` must equal the entry point's name (it is
what reports record); a shipped name always means the shipped class; a name two packages
declare is an error until one is uninstalled.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

EXTRACTOR_GROUP = "eqsat.extractors"
COST_MODEL_GROUP = "eqsat.cost_models"


def shipped(obj) -> bool:
    """Whether a class (or an object's class) is eqsat's own, not one a script registered or
    a package installed: eqsat's own errors keep their traceback, a plugin's are one line."""
    cls = obj if isinstance(obj, type) else type(obj)
    return cls.__module__.startswith(("extract.", "eqsat."))


class PluginError(Exception):
    """An installed plugin could not be used; the message names its package."""


def _points(group: str) -> dict[str, list[EntryPoint]]:
    out: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=group):
        if all(ep.value != e.value for e in out.get(ep.name, [])):  # one package found twice is one
            out.setdefault(ep.name, []).append(ep)
    return out


def _package(ep: EntryPoint) -> str:
    return f"package {ep.dist.name} {ep.dist.version}" if ep.dist else "an installed package"


def names(group: str) -> list[str]:
    """Entry-point names of `group`, without importing anything."""
    return sorted(_points(group))


def load(group: str, name: str, base: type, registry: dict) -> type | None:
    """Import plugin `name` of `group`, check it is a subclass of `base`, add it to
    `registry` and return it; None when no installed package declares that name."""
    found = _points(group).get(name)
    if not found:
        return None
    if len(found) > 1:
        raise PluginError(f"{group}: {len(found)} installed packages declare {name!r} ("
                          + ", ".join(f"{e.value!r} of {_package(e)}" for e in found) + "); uninstall all but one")
    ep = found[0]
    where = f"{group} entry point {name!r} = {ep.value!r} of {_package(ep)}"
    try:
        obj = ep.load()
    except Exception as e:  # noqa: BLE001 - any import failure is the plugin's, reported as such
        raise PluginError(f"{where} failed to load ({type(e).__name__}: {e}); fix or uninstall that package") from None
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise PluginError(f"{where} is not a subclass of {base.__module__}.{base.__qualname__}")
    if getattr(obj, "name", "") != name:
        raise PluginError(f"{where}: the class's name is {getattr(obj, 'name', '')!r}; make it {name!r}, "
                          "the entry point's name, which reports record")
    registry[name] = obj
    return obj


def find(group: str, name: str, base: type, registry: dict, kind: str) -> type:
    """The class `registry` has under `name`, else the installed plugin's (`load`); KeyError
    "unknown KIND 'name'; choose one of ..." listing the registered names, then the
    installed ones, when there is neither."""
    cls = registry.get(name) or load(group, name, base, registry)
    if cls is None:
        known = [*registry, *(n for n in names(group) if n not in registry)]
        raise KeyError(f"unknown {kind} {name!r}; choose one of {', '.join(known)}")
    return cls
