"""Writing result files whole or not at all, as a plain write would leave them: through a
symbolic link to its target, with the mode the file had or the one the umask gives.

`check_output` tells, before any work, whether a file can be written where it is named.
A `Commit` stages every output of a command under temporary names beside its target and
renames them into place together: when one rename fails, those already done are undone, so
that either every output is replaced or none is. `write_text` is a commit of one file.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

from eqsat.errors import EqsatError, UsageError

_PREFIX_CHARS = 40  # of the target's name in a temporary's: a temporary's name always fits


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


def check_output(path: str | os.PathLike, beside: dict[str, str] | None = None) -> Path:
    """The file a write to `path` lands in (`destination`), once it is known that it can be
    written there, and so can the files beside it named by its name plus each suffix of
    `beside` ({".data": "the model's data file"}): a symbolic link leads somewhere, the
    target is no folder and no special file (a pipe, a device), its folder exists, the names
    fit the file system, and a file can be created there (tried: root passes os.access for a
    read-only folder). Raises UsageError with one line saying which and what to do; leaves
    nothing behind."""
    p = Path(path)
    if "\0" in str(p):
        raise UsageError(f"{str(p)!r}: not a file name (a NUL byte)")
    try:
        if p.is_symlink():
            try:
                out = Path(os.path.realpath(p, strict=True))
            except FileNotFoundError:  # a link to a file yet to be written
                out = Path(os.path.realpath(p))
        else:
            out = p
        folder = out.parent if str(out.parent) else Path(".")
        st = os.stat(out) if os.path.lexists(out) else None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"{p}: a symbolic link that leads nowhere (a loop); name a file") from None
        if e.errno != errno.ENAMETOOLONG:
            raise UsageError(f"{p}: cannot write it: {e.strerror or e}") from None
        out, folder, st = p, (p.parent if str(p.parent) else Path(".")), None
    except (RuntimeError, ValueError) as e:  # a loop (Python < 3.13), a NUL byte
        raise UsageError(f"{p}: not a file name that can be written ({e})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{p} is a folder; give a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{p}: not a regular file; give a file name (outputs replace the file they name)")
    if not _is_dir(folder):
        raise UsageError(f"{p}: the output folder {folder} does not exist")
    for suffix, label in (beside or {}).items():  # replaced as they are: a link is not followed
        other = out.with_name(out.name + suffix)
        try:
            mode = os.lstat(other).st_mode
        except (OSError, ValueError):
            continue
        if stat.S_ISDIR(mode):
            raise UsageError(f"{p}: {label} beside it, {other}, is a folder; move it or name another output")
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise UsageError(f"{p}: {label} beside it, {other}, is not a regular file; move it or name another "
                             "output")
    names = {"": "", **{s: f" for {label} beside it, {out.name + s}" for s, label in (beside or {}).items()}}
    limit = _name_max(folder)
    for suffix, label in names.items():
        n = len(os.fsencode(out.name + suffix))
        if n > limit:
            raise UsageError(f"{p}: the file name is too long{label} ({n} bytes; {folder} allows {limit})")
    if not os.access(folder, os.W_OK | os.X_OK):  # the answer for anyone but root
        raise UsageError(f"{p}: the output folder {folder} is not writable; choose another folder")
    _probe(p, folder, max(len(os.fsencode(out.name + s)) for s in names))
    return out


def _is_dir(folder: Path) -> bool:
    try:
        return folder.is_dir()
    except (OSError, ValueError):  # a name too long in the path
        return False


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def _probe(p: Path, folder: Path, length: int) -> None:
    """Create and remove a file named as long as `length` bytes in `folder`."""
    name = f".eqsat-probe-{secrets.token_hex(4)}"
    name += "x" * max(0, length - len(name))
    try:
        fd = os.open(folder / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise UsageError(f"{p}: the file name is too long for {folder}") from None
        raise UsageError(f"{p}: the output folder {folder} is not writable ({e.strerror or e}); "
                         "choose another folder") from None
    os.close(fd)
    try:
        os.unlink(folder / name)
    except OSError:
        pass


def _temp_prefix(target: Path) -> str:
    return f".{target.name[:_PREFIX_CHARS]}."


def _cannot_write(target: Path, e: OSError, replaced_none: bool = False) -> EqsatError:
    tail = "; no output was replaced" if replaced_none else ""
    return EqsatError(f"{target}: cannot write it: {e.strerror or e}{tail}")


class Commit:
    """The outputs of one command, written beside their targets under temporary names
    (`text`, `folder` and `add`) and renamed into place together by `commit`: a failed
    rename, an error, Ctrl-C or SIGTERM while they are renamed puts back every file already
    replaced (or removes it, where there was none), so that every target is replaced or none
    is. Used as a context manager, it removes on exit every temporary that was not renamed
    into place. Targets are `destination`s (a symbolic link's target)."""

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []  # (temporary, target), in commit order
        self._temporaries: list[Path] = []

    def __enter__(self) -> Commit:
        return self

    def __exit__(self, *exc) -> None:
        self.discard()

    def discard(self) -> None:
        """Remove every temporary file and folder left."""
        for t in reversed(self._temporaries):
            if t.is_dir() and not t.is_symlink():
                shutil.rmtree(t, ignore_errors=True)
            else:
                t.unlink(missing_ok=True)
        self._temporaries.clear()
        self._pending.clear()

    def folder(self, path: str | os.PathLike) -> Path:
        """A new temporary folder beside `path`'s destination, removed on exit."""
        out = destination(path)
        try:
            d = Path(tempfile.mkdtemp(prefix=_temp_prefix(out), dir=_folder(out)))
        except OSError as e:
            raise _cannot_write(out, e) from None
        self._temporaries.append(d)
        return d

    def add(self, temporary: Path, path: str | os.PathLike, through_links: bool = True) -> None:
        """Rename `temporary` (a file in a folder beside the target, from `folder`) to
        `path`'s destination at `commit`, or to `path` itself, a symbolic link replaced by
        the file, when not `through_links` (a file that must lie where it is named)."""
        self._pending.append((Path(temporary), destination(path) if through_links else Path(path)))

    def withdraw(self, *paths: str | os.PathLike) -> None:
        """Rename nothing to these targets at `commit` (a file staged again for them replaces
        the earlier one); their temporaries are removed on exit as any other."""
        gone = {destination(p) for p in paths} | {Path(p) for p in paths}
        self._pending = [(t, target) for t, target in self._pending if target not in gone]

    def text(self, path: str | os.PathLike, text: str) -> Path:
        """Write `text` under a temporary name beside `path`'s destination, to be renamed at
        `commit`; returns the destination. An OSError is an EqsatError naming the file."""
        out = destination(path)
        try:
            fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(out), dir=_folder(out))
        except OSError as e:  # a folder that refuses files (permissions, a read-only file system)
            raise _cannot_write(out, e) from None
        self._temporaries.append(Path(tmp))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:  # a full disk
            raise _cannot_write(out, e) from None
        self._pending.append((Path(tmp), out))
        return out

    def commit(self) -> None:
        """Rename every staged file into place, in the order staged, each with the mode of
        the file it replaces; on any failure undo the renames done and raise (an OSError as
        an EqsatError: "TARGET: cannot write it: why; no output was replaced")."""
        done: list[tuple[Path, Path | None]] = []  # (target, its previous file set aside)
        current = None
        try:
            for tmp, target in self._pending:
                current = target
                os.chmod(tmp, file_mode(target))
            for tmp, target in self._pending:
                current = target
                done.append((target, _set_aside(target)))
                os.replace(tmp, target)
        except BaseException as e:
            _undo(done)
            if isinstance(e, OSError):
                raise _cannot_write(current, e, replaced_none=True) from None
            raise
        for _, aside in done:
            if aside is not None:
                aside.unlink(missing_ok=True)
        self._pending.clear()


def _folder(out: Path) -> Path:
    return out.parent if str(out.parent) else Path(".")


def _set_aside(target: Path) -> Path | None:
    """Keep the file at `target` under a new name beside it, as a hard link (the target
    stays in place), or, where the file system has none, by renaming it; None when there is
    no file to keep."""
    if not os.path.lexists(target):
        return None
    while True:
        aside = target.with_name(f"{_temp_prefix(target)}old-{secrets.token_hex(4)}")
        try:
            os.link(target, aside, follow_symlinks=False)
            return aside
        except FileExistsError:
            continue
        except OSError:
            break
    while True:
        aside = target.with_name(f"{_temp_prefix(target)}old-{secrets.token_hex(4)}")
        if not os.path.lexists(aside):
            os.replace(target, aside)
            return aside


def _undo(done: list[tuple[Path, Path | None]]) -> None:
    """Put back what the renames in `done` replaced, last first; a file that did not exist
    before is removed. Best effort: it runs while an error is on its way (a file set aside
    that cannot be put back stays beside its target)."""
    for target, aside in reversed(done):
        try:
            if aside is None:
                target.unlink(missing_ok=True)
            elif _same_entry(aside, target):  # not replaced yet
                aside.unlink()
            else:
                os.replace(aside, target)
        except BaseException:  # noqa: BLE001 - the error on its way is the one to report
            continue


def _same_entry(a: Path, b: Path) -> bool:
    """Whether two names are links to one file (or one symbolic link), not following links."""
    try:
        sa, sb = os.lstat(a), os.lstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` atomically: a temporary file in the same folder, then a
    rename, so that an error, Ctrl-C or SIGTERM leaves `path` as it was, with no partial
    file beside it. Returns the file written (`destination`)."""
    with Commit() as c:
        out = c.text(path, text)
        c.commit()
    return out
