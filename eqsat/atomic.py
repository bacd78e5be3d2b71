"""Writing a result file whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import output_folder


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` atomically: a temporary file in the same folder, then a
    rename, so that an error, Ctrl-C or SIGTERM leaves `path` as it was, with no partial
    file beside it."""
    out = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=output_folder(out))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
