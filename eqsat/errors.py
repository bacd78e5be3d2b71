"""Errors the user can act on. Each carries the exit code the CLI returns for it:
2 for bad usage or unreadable input, 1 when optimization or verification fails."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class EqsatError(Exception):
    exit_code = 1


class UsageError(EqsatError):
    exit_code = 2


class InputError(EqsatError):
    """The input file cannot be read as an ONNX model."""

    exit_code = 2


class InvalidModelError(InputError):
    """The file is ONNX, but the model is not valid."""


class RuleError(EqsatError):
    """A rule file does not parse or type-check; the message is FILE:LINE:COL: message."""

    exit_code = 2


class OptimizeError(EqsatError):
    """Optimization failed (an internal check did not hold, egglog panicked, ...)."""

    exit_code = 1


class Terminated(BaseException):
    """SIGTERM, raised in the main thread by `eqsat.cli.main.main` so that `finally` blocks (the
    staged output's temporary folder) clean up, as they do for Ctrl-C. A BaseException, so
    that the `except Exception` around onnxruntime calls lets it through."""


# What an `except BaseException` (egglog's panics are BaseExceptions) must re-raise.
INTERRUPTS = (KeyboardInterrupt, SystemExit, Terminated)


def output_folder(out) -> Path:
    """The folder a file `out` will be written to; InputError if it does not exist (checked
    before the work, by the command line, and again by every writer)."""
    out = Path(out)
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{out}: the output folder {folder} does not exist")
    return folder


@contextmanager
def extraction_errors(what: str, *parts) -> Iterator[None]:
    """Run an extractor or cost model: a failed check or a broken cost contract becomes an
    OptimizeError "`what`: reason"; so does any exception raised by `parts` that are not
    eqsat's own (a plugin's bug is one line naming it; eqsat's own keep their traceback)."""
    from eqsat.extract import ExtractionError
    from eqsat.extract.costs import CostModelError
    from eqsat.extract.plugins import shipped

    try:
        yield
    except (ExtractionError, CostModelError) as e:
        raise OptimizeError(f"{what}: {e}") from None
    except EqsatError:
        raise
    except Exception as e:
        classes = [p if isinstance(p, type) else type(p) for p in parts]
        others = [f"{c.__module__}.{c.__qualname__}" for c in classes if not shipped(c)]
        if not others:
            raise
        raise OptimizeError(f"{what}: {type(e).__name__}: {e} (in {', '.join(others)})") from None
