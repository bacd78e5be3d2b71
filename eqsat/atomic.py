"""Writing a result file whole or not at all, as a plain write would leave it: through a
symbolic link to its target, with the mode the file had or the one the umask gives."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import EqsatError, output_folder


def destination(path: str | os.PathLike) -> Path:
    """The file a write to `path` lands in: a symbolic link's target (as a shell's `>`
    writes through the link; a rename would replace the link itself), else `path`."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def file_mode(path: str | os.PathLike) -> int:
    """The permission bits a rewritten `path` keeps: those of the file it replaces, else
    0o666 less the umask, as open() would give a new file (a temporary file is created 0600)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` atomically: a temporary file in the same folder, then a
    rename, so that an error, Ctrl-C or SIGTERM leaves `path` as it was, with no partial
    file beside it."""
    out = destination(path)
    mode = file_mode(out)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=output_folder(out))
    except OSError as e:  # a folder that refuses files (permissions, a read-only or special file system)
        raise EqsatError(f"{out}: cannot write it: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, out)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # a full disk
            raise EqsatError(f"{out}: cannot write it: {e.strerror or e}") from None
        raise
    return out
