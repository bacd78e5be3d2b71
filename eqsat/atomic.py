"""Writing a result file whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import EqsatError, output_folder


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` atomically: a temporary file in the same folder, then a
    rename, so that an error, Ctrl-C or SIGTERM leaves `path` as it was, with no partial
    file beside it."""
    out = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=output_folder(out))
    except OSError as e:  # a folder that refuses files (permissions, a read-only or special file system)
        raise EqsatError(f"{out}: cannot write it: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # a full disk
            raise EqsatError(f"{out}: cannot write it: {e.strerror or e}") from None
        raise
    return out
