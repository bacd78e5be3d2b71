"""Argument types the command lines share (`eqsat` and its subcommands, the benchmarks).

Each takes the argument's text and returns its value, or raises
`argparse.ArgumentTypeError` with a message that says what was expected. Beside them, the
checks of parsed arguments the commands share: output files against inputs, and `--dim`
names the model has no symbolic dimension for.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eqsat.errors import EqsatError, UsageError


def _number(s: str, cast, kind: str, ok, bound: str):
    try:
        v = cast(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {kind}: {s!r}") from None
    if not ok(v):  # NaN fails every bound
        raise argparse.ArgumentTypeError(f"must be {bound}: {s}")
    return v


def positive_int(s: str) -> int:
    """An integer > 0 (`--runs 20`)."""
    return _number(s, int, "an integer", lambda v: v > 0, "> 0")


def nonnegative_int(s: str) -> int:
    """An integer >= 0 (`--context 0`)."""
    return _number(s, int, "an integer", lambda v: v >= 0, ">= 0")


def power_of_two(s: str) -> int:
    """An integer power of two (`--alignment 64`): an offset aligned to 3 bytes would
    misalign every float."""
    return _number(s, int, "an integer", lambda v: v > 0 and v & (v - 1) == 0, "a power of two")


def positive_float(s: str) -> float:
    """A number > 0 (`--time-limit 2.5`)."""
    return _number(s, float, "a number", lambda v: v > 0, "> 0")


def nonnegative_float(s: str) -> float:
    """A number >= 0 (`--atol 0`)."""
    return _number(s, float, "a number", lambda v: v >= 0, ">= 0")


def dim(s: str) -> tuple[str, int]:
    """A symbolic dimension's size, `NAME=VALUE` with VALUE > 0 (`--dim batch=8` -> ("batch", 8))."""
    name, _, value = s.partition("=")
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with an integer value: {s!r}") from None
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with the dimension's name before '=': {s!r}")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with VALUE > 0: {s!r}")
    return name, v


def warn_unknown_model_dims(model, dims: list[tuple[str, int]]) -> None:
    """A --dim the model has no symbolic dimension for binds nothing: say so (a typo of
    `sequence` would otherwise silently leave the default size)."""
    g = model.graph
    names = {d.dim_param for v in (*g.input, *g.output, *g.value_info)
             for d in v.type.tensor_type.shape.dim if d.dim_param}
    warn_unknown_dims(names, dims, "the model")


def warn_unknown_dims(names: set[str], dims: list[tuple[str, int]], what: str) -> None:
    """Warn for each --dim NAME not among `names`, the symbolic dimensions `what` has."""
    for name, _ in dims:
        if name not in names:
            have = ", ".join(sorted(names)) or "none"
            print(f"eqsat: warning: --dim {name}: {what} has no symbolic dimension of that name "
                  f"(its symbolic dimensions: {have})", file=sys.stderr)


def output_file(s: str) -> Path:
    """A file to write (`--report out/r.json`), checked when the command line is read, before
    any work (eqsat.io.atomic.check_output): its folder exists and takes a new file, its name
    fits, a symbolic link leads somewhere, and it is no folder or special file, so that a long
    run does not end in an error with its result unwritten."""
    from eqsat.io.atomic import check_output

    try:
        check_output(s)
    except EqsatError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return Path(s)


def _label(action: argparse.Action) -> str:
    return action.option_strings[-1] if action.option_strings else "the input"


def named_files(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[tuple[Path, str]],
                                                                                    list[tuple[Path, str]]]:
    """(inputs, outputs) of a parsed command line, each a list of (path, the argument that
    names it): outputs are the arguments of type `output_file`, inputs every other
    argument's value (or list of values) that names an existing file."""
    inputs: list[tuple[Path, str]] = []
    outputs: list[tuple[Path, str]] = []
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if isinstance(action, argparse._SubParsersAction) and value in action.choices:  # `rules check`
            more_in, more_out = named_files(action.choices[value], args)
            inputs += more_in
            outputs += more_out
            continue
        for v in value if isinstance(value, list) else [value]:
            if not isinstance(v, (str, Path)):
                continue
            if action.type is output_file:
                outputs.append((Path(v), _label(action)))
            elif _is_file(Path(v)):
                inputs.append((Path(v), _label(action)))
    return inputs, outputs


def _is_file(p: Path) -> bool:
    try:
        return p.is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte: not a file
        return False


def _data_files_of(model_file: Path) -> tuple[Path, ...]:
    from eqsat.io.external import data_files_of  # numpy and onnx, loaded only when an output exists

    return data_files_of(model_file.resolve())


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same path once links are resolved, or hard links."""
    if a.resolve() == b.resolve():
        return True
    try:
        return a.exists() and b.exists() and a.samefile(b)  # hard links
    except OSError:
        return False


def refuse_overwrites(inputs: list[tuple[Path, str]], outputs: list[tuple[Path, str]],
                      hints: dict[tuple[str, str], str | None] | None = None) -> None:
    """UsageError, before any work, when an output would overwrite an input's file, a data
    file an input model reads its weights from, or another output (`--report` written over
    the model it reports on, `-o` over the input's `weights.bin`). `hints`: for
    an (output, input) pair of arguments, what the user can do about it (a line added to the
    error), or None where the pair may name one file (`--output` with `--in-place`)."""
    hints = hints or {}
    for i, (out, what) in enumerate(outputs):
        for src, src_what in inputs:
            if same_file(out, src) and hints.get((what, src_what), "") is not None:
                whose = f"the input {src}" if src_what == "the input" else f"{src}, the {src_what} file"
                hint = hints.get((what, src_what)) or "name another file"
                raise UsageError(f"{out}: {what} would overwrite {whose}; {hint}")
            # only a file that exists can be a data file: the input models are searched then
            if _is_file(out) and any(same_file(out, f) for f in _data_files_of(src)):
                raise UsageError(f"{out}: {what} would overwrite {out}, the input's data file; name another file")
        for other, other_what in outputs[:i]:
            if same_file(out, other):
                raise UsageError(f"{out}: {other_what} and {what} name the same file; give each its own")


# Arguments several commands take, declared once; `help` completes the shared text where a
# command's use differs.
DIM_HELP = "size of a symbolic dimension (repeatable), e.g. --dim batch=8"


def add_dim(p: argparse.ArgumentParser, more: str = "") -> None:
    p.add_argument("--dim", action="append", default=[], type=dim, metavar="NAME=VALUE", help=DIM_HELP + more)


def add_rules(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rules", metavar="FILE.egg", action="append", default=[], type=Path,
                   help="a rule file to load after the default rules (repeatable)")


def add_target(p: argparse.ArgumentParser, help: str) -> None:  # noqa: A002 - argparse's name
    from eqsat.settings import TARGET_DEFAULT

    p.add_argument("--target", default=TARGET_DEFAULT, choices=["ort", "onnx"], help=help)


def add_hardware(p: argparse.ArgumentParser, help: str, default: str | None = None) -> None:  # noqa: A002
    p.add_argument("--hardware", default=default, metavar="PROFILE", help=help)


def add_quiet(p: argparse.ArgumentParser, help: str = "no progress on stderr") -> None:  # noqa: A002
    p.add_argument("-q", "--quiet", action="store_true", help=help)


def progress(quiet: bool):
    """A progress printer for a command: each line on stderr, `eqsat: [SECONDS] MESSAGE` with
    the seconds since it began; nothing with `quiet`."""
    import time

    t0 = time.perf_counter()

    def say(msg: str) -> None:
        if not quiet:
            print(f"eqsat: [{time.perf_counter() - t0:6.2f}s] {msg}", file=sys.stderr, flush=True)

    return say
