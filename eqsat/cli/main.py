"""The `eqsat` command line.

Exit codes: 0 success; 1 optimization or verification failed; 2 bad usage or unreadable
input. Errors are one line on stderr, `eqsat: error: ...`; progress goes to stderr too.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from eqsat import __version__
from eqsat.cli.args import (
    named_files,
    refuse_overwrites,
)
from eqsat.errors import EqsatError, Terminated, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors exit 2 with one line
        self.print_usage(sys.stderr)
        raise UsageError(message)


# One module per command: each module's `register(subparsers)` adds its parsers and returns
# {command: handler}; a handler takes the parsed arguments and returns the exit code. The
# order is `eqsat --help`'s.
COMMAND_MODULES = ("eqsat.cli.optimize", "eqsat.cli.compare_costs", "eqsat.cli.calibrate", "eqsat.cli.extract",
                   "eqsat.cli.export_egraph", "eqsat.cli.plan", "eqsat.cli.conformance", "eqsat.cli.rules",
                   "eqsat.cli.viz")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    p = _Parser(prog="eqsat", description="Optimize ONNX models by equality saturation.")
    p.add_argument("--version", action="version", version=f"eqsat {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    handlers = {}
    for name in COMMAND_MODULES:
        handlers.update(importlib.import_module(name).register(sub))
    p.set_defaults(handlers=handlers)
    p.commands = sub.choices  # a subcommand's own parser reports its unknown arguments (main)
    return p


def _raise_terminated(signum, frame):
    raise Terminated()


def run() -> NoReturn:
    """The `eqsat` program (console script and `python -m eqsat`): `main` in a process whose
    allocator keeps freed memory for reuse (eqsat.io.allocator)."""
    import signal

    from eqsat.io.allocator import reuse_freed_memory

    reuse_freed_memory()
    rc = main()
    # The outcome is settled: a Ctrl-C or SIGTERM while the interpreter shuts down would only
    # print a traceback from its threads' shutdown or replace the exit status.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(rc)


def main(argv: list[str] | None = None) -> int:
    import signal
    import threading

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main else None
    try:
        return _main(argv)
    except Terminated:  # anywhere, start-up included
        print("eqsat: terminated", file=sys.stderr)
        return 143
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # with the subcommand's usage, not the top level's
            parser.commands.get(args.command, parser).error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command is None:
            parser.print_help(sys.stderr)
            print("eqsat: error: a command is required (optimize, plan, show, ...)", file=sys.stderr)
            return 2
        from eqsat.environment import check_environment

        check_environment()  # a bad EQSAT_* setting fails every command before any work
        hints = {}
        if args.command == "optimize":
            hints[("--output", "the input")] = None if args.in_place else "pass --in-place to allow it"
        args.named_inputs, outputs = named_files(parser.commands[args.command], args)
        refuse_overwrites(args.named_inputs, outputs, hints)
        return args.handlers[args.command](args)
    except EqsatError as e:
        print(f"eqsat: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("eqsat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `eqsat rules list | head`: the reader left; say nothing more
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at interpreter exit
        return 141


if __name__ == "__main__":
    sys.exit(main())
