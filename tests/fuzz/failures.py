"""Keeping a failing example's inputs: files a user can run `eqsat` on by hand.

Where $EQSAT_FUZZ_FAILURES names a folder (the campaign sets it), a property's body that
fails writes its inputs to FOLDER/PROPERTY/, replacing the last ones: hypothesis runs the
shrunk example last, so what stays is the minimal failing example.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis.errors import UnsatisfiedAssumption


def folder(prop: str) -> Path | None:
    root = os.environ.get("EQSAT_FUZZ_FAILURES")
    return Path(root) / prop if root else None


@contextmanager
def kept(prop: str, files: dict[str, bytes | str], tree: Path | None = None) -> Iterator[None]:
    """On an exception (an assumption that did not hold aside), write `files` (name ->
    content) and a copy of the folder `tree` (as it was before the command ran, where the
    caller copied it) to the property's failure folder."""
    try:
        yield
    except UnsatisfiedAssumption:
        raise
    except BaseException as e:
        out = folder(prop)
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                p = out / name
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "replace"))
            (out / "failure.txt").write_text(f"{type(e).__name__}: {e}"[:20000])
            if tree is not None and tree.exists():
                shutil.copytree(tree, out / "folder", symlinks=True, dirs_exist_ok=True)
        raise


def keep_refusal(prop: str, key: str, files: dict[str, bytes | str]) -> None:
    """Where $EQSAT_FUZZ_FAILURES is set, keep the first input eqsat refused with each kind of
    message (`key`) in FOLDER/../refusals/PROPERTY/N/: a valid input refused is worth a look."""
    out = folder(prop)
    if out is None:
        return
    root = out.parent.parent / "refusals" / prop
    root.mkdir(parents=True, exist_ok=True)
    index = root / "index.txt"
    seen = index.read_text().splitlines() if index.exists() else []
    if key in seen:
        return
    d = root / str(len(seen))
    d.mkdir(exist_ok=True)
    for name, content in {**files, "message.txt": key}.items():
        (d / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "replace"))
    with index.open("a") as f:
        f.write(key + "\n")
