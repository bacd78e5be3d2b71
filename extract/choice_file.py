"""Choice files: an extraction kept as JSON, to check, compare or decode later.

    {"format": 1, "egraph_digest": "...", "extractor": "ilp", "cost_model": "node-count",
     "dag_cost": 6.2, "tree_cost": 6.2, "settings": {...}, "choice": {"<e-class>": "<node id>", ...}}

Only `choice` is required, so a choice made by another tool (extraction-gym's, say) is a
file `{"choice": {...}}`, or the bare mapping itself. `egraph_digest` (EGraph.digest) says
which e-graph the node ids belong to, and `settings` (the e-graph's `eqsat.settings`) what
made it, so that a mismatch can name the option that differs.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import schema
from .base import Extraction
from .egraph import EGraph
from .schema import EGraphFormatError

FORMAT = 1


class ChoiceFileError(ValueError):
    """The file is not a choice file; the message says what is wrong with it."""


def as_json(ex: Extraction, egraph: EGraph, cost_model: str, dims: dict[str, int] | None = None) -> dict:
    """The choice file: the choice, what made it, its costs and the symbolic sizes those
    costs were computed at (`dims`; a check prices it at the same unless told others)."""
    return {"format": FORMAT, "egraph_digest": egraph.digest(), "extractor": ex.extractor, "cost_model": cost_model,
            "dag_cost": ex.dag_cost, "tree_cost": ex.tree_cost, "dims": dict(dims or {}), "notes": ex.notes,
            "settings": egraph.meta.get("settings", {}), "choice": ex.choice}


def read(path: str | Path) -> tuple[dict[str, str], dict]:
    """(choice, the file's other fields). ChoiceFileError names the file and the fault: a
    field eqsat reads that does not hold what it must is `PATH: FIELD: expected WHAT, got
    VALUE` (`choice`: e-class -> node id, strings; `egraph_digest`, `extractor`,
    `cost_model`: strings; `settings`: an object; `dims`: NAME -> integer > 0; `format`:
    an integer from 1 to FORMAT)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ChoiceFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ChoiceFileError(f"{path}: cannot read it ({e})") from None
    except json.JSONDecodeError as e:
        raise ChoiceFileError(f"{path}: not JSON ({e})") from None
    if isinstance(data, dict) and isinstance(data.get("choice"), dict):
        choice, meta = data["choice"], {k: v for k, v in data.items() if k != "choice"}
    else:
        choice, meta = data, {}
    if not isinstance(choice, dict) or not choice or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in choice.items()):
        raise ChoiceFileError(f'{path}: not a choice file: expected {{"choice": {{e-class: node id, ...}}}} '
                              "with strings for both (eqsat extract -o writes one)")
    try:
        _check_fields(meta)
    except EGraphFormatError as e:
        raise ChoiceFileError(f"{path}: {e}") from None
    if meta.get("format", FORMAT) > FORMAT:
        raise ChoiceFileError(f"{path}: choice file format {meta['format']} is newer than this reader's ({FORMAT})")
    return choice, meta


def _check_fields(meta: dict) -> None:
    for key in ("egraph_digest", "extractor", "cost_model"):
        if key in meta:
            schema.need_str(meta[key], key)
    schema.need_object(meta.get("settings", {}), "settings")
    if "dims" in meta:
        schema.positive_sizes(meta["dims"], "dims")
    fmt = meta.get("format", FORMAT)
    if not (schema.is_int(fmt) and fmt >= 1):
        raise EGraphFormatError("format", "an integer >= 1 (the choice file format's version)", fmt)


def same_egraph(meta: dict, egraph: EGraph) -> str | None:
    """Why the choice's node ids may not be this e-graph's, or None (no digest recorded:
    nothing to compare; `extract.check` still checks the choice itself). Names the settings
    that differ where both sides record them."""
    want = meta.get("egraph_digest")
    have = egraph.digest()
    if want is None or want == have:
        return None
    why = f"the choice was made on another e-graph (digest {want}; this one is {have})"
    theirs, ours = meta.get("settings") or {}, egraph.meta.get("settings") or {}
    differ = [f"{k} {theirs[k]!r} there, {ours[k]!r} here" for k in theirs if k in ours and theirs[k] != ours[k]]
    if differ:
        return f"{why}; its settings differ: {'; '.join(differ)}"
    return (f"{why}: saturate with the options of the run that saved it (rules, --target, --layout, --hardware, "
            "--fold-limit, --explain, limits), or use its own e-graph file")
