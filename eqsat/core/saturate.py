"""The saturation driver: rule files into one e-graph, then rounds of the schedule under
limits, with the reason it stopped.

A round runs the schedule (`rules/schedule.egg`, a `run-schedule` command) once, then one
`(run R)` for each ruleset that a user rule file declares. Before a round the driver
pushes the e-graph; a round that leaves more e-nodes than the node limit is popped (rolled
back) and saturation stops, so the limit holds for the e-graph that extraction sees. The
time limit is checked between rounds. Between rounds, hooks (the constant-folding oracle)
may add facts: after a round whose rules changed nothing, after HOOK_EVERY rounds without
hooks, and after the last round a limit allows. Saturation ends when a round's rules and
its hooks change nothing.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from egglog import bindings as b

from eqsat.core.rulefiles import (
    SCHEDULE,
    SPAN_RE,
    Declared,
    default_rule_files,
    display_path,
    load_rule_file,
    rules_dir,
)
from eqsat.errors import INTERRUPTS, OptimizeError, RuleError
from eqsat.io.quiet import native_stderr
from eqsat.lang.ops import prelude_disagreements
from eqsat.limits import Limits

SPAN = b.PanicSpan()
# A hook (the oracle) serializes the whole e-graph: at 20k nodes it cost 2.3 s a round while
# the rules' round cost 0.1 s. Hooks wait for the rules to settle, at most this many rounds.
HOOK_EVERY = 3
_RULES_FAILED = "egglog failed while running the rules: {}; {} (nothing written)"
_WHOSE = ("check the --rules files", "a fault of eqsat's default rules: please report it with the model")


@dataclass
class SaturationReport:
    stop_reason: str = "saturated"  # saturated | iteration-limit | node-limit | time-limit
    stop_detail: str = ""
    iterations: int = 0
    enodes_before: int = 0
    enodes: int = 0
    time_s: float = 0.0
    rule_matches: Counter = field(default_factory=Counter)
    # rule_matches split: rules that add an equal form (union), rules that only derive facts
    rewrite_matches: Counter = field(default_factory=Counter)
    analysis_matches: Counter = field(default_factory=Counter)
    rounds: list[dict] = field(default_factory=list)


@dataclass
class _Loaded:
    """An e-graph with rule files loaded, and what they declare."""

    eg: b.EGraph
    declared: Declared
    schedule: list
    user_rulesets: list[str]  # run once a round after the schedule; "" is egglog's default ruleset
    fact_uses: dict[str, set[str]] = field(default_factory=dict)  # with explain: eqsat.core.provenance
    transform: object = None  # with explain: the Instrumenter that loaded the files (eqsat.core.provenance)
    n_default: int = 0  # rulesets the default files declare (the first of declared.rulesets)


# The default rule files (or the prelude alone) loaded once per process: loading type-checks
# and compiles every rule (most of a small model's optimization time). Each optimization
# pushes the e-graph, loads the user's rule files (--rules) on top, works on top of them, and
# pops back to the default rules alone; a user's file is small, and loading it on a copy of the
# defaults would cost the defaults' 2.5 s again. At most MAX_LOADED e-graphs are kept (one each
# for default_rules and explain), the least recently used dropped first: each holds about
# 575 MiB.
_LOADED: OrderedDict[tuple, _Loaded] = OrderedDict()
MAX_LOADED = 2
_BATCHES = itertools.count(1)  # names of run_batch's one-shot rulesets, unique per process


def _key(default_rules: bool, explain: bool = False) -> tuple:
    """The cache key of the default rules' e-graph: what loads it, and each default file's
    path and modification time (an edited default file is loaded afresh)."""
    def stamp(p: Path) -> tuple:
        try:
            return (str(Path(p).resolve()), Path(p).stat().st_mtime_ns)
        except OSError:
            return (str(p), None)

    defaults = default_rule_files() + [rules_dir() / SCHEDULE]
    return (default_rules, explain, tuple(stamp(p) for p in defaults))


class Saturator:
    """Owns an egglog e-graph: rules loaded (cached per process), then rounds under limits.
    Call `close()` when done with it, which returns the e-graph to the rules alone.
    `explain` loads the rules instrumented to record what they build (eqsat.core.provenance),
    into an e-graph of their own: the default path never runs instrumented rules."""

    def __init__(self, rule_files: list[Path] | None = None, default_rules: bool = True,
                 explain: bool = False) -> None:
        rule_files = list(rule_files or [])
        self._key = _key(default_rules, explain)
        self._user_rules = bool(rule_files)
        loaded = _LOADED.get(self._key)
        if loaded is None:
            loaded = _load([], default_rules, explain)
            _LOADED[self._key] = loaded
            while len(_LOADED) > MAX_LOADED:  # a Saturator working on one keeps its e-graph
                _LOADED.popitem(last=False)
        _LOADED.move_to_end(self._key)
        self.eg = loaded.eg
        self._depth = 0
        if rule_files:  # on top of the default rules, until close() pops them
            self._push()
            try:
                loaded = _load_user(loaded, rule_files, default_rules)
            except BaseException:
                self.close()
                raise
        self.declared = loaded.declared
        self.schedule = loaded.schedule
        self.user_rulesets = loaded.user_rulesets
        self.fact_uses = loaded.fact_uses  # rule -> the rules whose facts its query reads (explain only)
        self._push()

    def _push(self) -> None:
        self.run_commands([b.Push(1)])
        self._depth += 1

    def _pop(self) -> None:
        self.run_commands([b.Pop(SPAN, 1)])
        self._depth -= 1

    def close(self) -> None:
        """Drop the model from the shared e-graph (back to the loaded rules)."""
        try:
            while self._depth > 0:
                self._pop()
        except Exception:  # noqa: BLE001 - a broken e-graph is not reused
            _LOADED.pop(self._key, None)

    def _whose(self) -> str:
        """Where to look when a rule's action failed: the user's files, if any were loaded."""
        return _WHOSE[0] if self._user_rules else _WHOSE[1]

    def _parse(self, text: str, path: str) -> list:
        return _parse(self.eg, text, path, self.declared)

    def run_commands(self, cmds: list) -> list:
        try:
            with native_stderr():  # a panic's message is the exception's: eqsat prints one line
                return self.eg.run_program(*cmds)
        except b.EggSmolError as e:
            last = str(e).splitlines()[-1] if str(e) else type(e).__name__
            if "Panic: " not in str(e):
                raise OptimizeError(f"egglog rejected the encoded model: {last}") from None
            # egglog 14: a primitive failed in a rule's action (`Panic: In 2:5-9 of F: (log2 0): ...`)
            _LOADED.pop(self._key, None)
            m = SPAN_RE.match(last.removeprefix("Panic: "))
            raise OptimizeError(_RULES_FAILED.format(m.group(5) if m else last, self._whose())) from None
        except BaseException as e:  # egglog 13 panics are BaseException (pyo3 PanicException)
            if isinstance(e, INTERRUPTS):
                raise
            _LOADED.pop(self._key, None)  # do not reuse an e-graph egglog panicked on
            raise OptimizeError(_RULES_FAILED.format(str(e).splitlines()[0] if str(e) else type(e).__name__,
                                                     self._whose())) from None

    def run_batch(self, cmds: list) -> None:
        """Run commands, each run of consecutive actions (`let`, `union`, `set`) as one
        one-shot rule in a ruleset of its own, run once: egglog then does the work of one
        command for the whole batch instead of one per action (a command costs time in
        proportion to the e-graph, so separate commands made encoding quadratic). `let`
        names are local to their batch. The rules live until the next pop."""
        out: list = []
        actions: list = []

        def flush() -> None:
            if actions:
                rs = f"eqsat-batch-{next(_BATCHES)}"
                out.extend([b.AddRuleset(SPAN, rs),
                            b.RuleCommand(b.Rule(SPAN, list(actions), [], rs, rs)),
                            b.RunSchedule(b.Run(SPAN, b.RunConfig(rs, None)))])
                actions.clear()

        for c in cmds:
            if isinstance(c, b.ActionCommand):
                actions.append(c.action)
            else:
                flush()
                out.append(c)
        flush()
        if out:
            self.run_commands(out)

    def size(self) -> int:
        """E-nodes: rows of constructor tables (function tables not counted)."""
        sizes = self.run_commands([b.PrintSize(SPAN, None)])[0].sizes
        ctors = self.declared.constructors
        return sum(n for name, n in sizes if name in ctors)

    def _round_commands(self) -> list:
        cmds = list(self.schedule)
        for rs in self.user_rulesets:
            run = b.Call(SPAN, "run", [b.Var(SPAN, rs)] if rs else [])  # (run): the default ruleset
            cmds.append(b.UserDefined(SPAN, "run-schedule", [run]))
        return cmds

    def saturate(
        self,
        limits: Limits,
        hooks: list[Callable[[Saturator], list]] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> SaturationReport:
        """Run rounds until nothing changes or a limit is reached.

        A hook is called after each round's rules and returns commands that add facts (the
        folding oracle's unions); they count as a change. The e-graph is pushed once before
        the first round; a round that passes the node limit is undone by popping back to
        that snapshot and replaying the earlier rounds with their recorded hook commands
        (egglog is deterministic), so extraction sees the last e-graph within the limit.
        """
        rep = SaturationReport()
        t0 = time.perf_counter()
        rep.enodes_before = rep.enodes = self.size()
        cmds = self._round_commands()
        history: list[list] = []  # hook commands of each completed round
        self._push()
        since_hooks = 0
        while True:
            if rep.iterations >= limits.iter_limit:
                rep.stop_reason, rep.stop_detail = "iteration-limit", f"{limits.iter_limit} rounds"
                break
            if time.perf_counter() - t0 > limits.time_limit:
                rep.stop_reason, rep.stop_detail = "time-limit", f"{limits.time_limit:g} s"
                break
            tr = time.perf_counter()
            outs = self.run_commands(cmds) if cmds else []
            rules_changed = False
            matches: Counter = Counter()
            for o in outs:
                if isinstance(o, b.RunScheduleOutput):
                    rules_changed |= bool(o.report.updated)
                    matches.update({k: v for k, v in o.report.num_matches_per_rule.items() if v})
            rules_s = time.perf_counter() - tr
            since_hooks += 1
            last = rep.iterations + 1 >= limits.iter_limit or time.perf_counter() - t0 > limits.time_limit
            added: list = []
            ran_hooks = bool(hooks) and (not rules_changed or since_hooks >= HOOK_EVERY or last)
            if ran_hooks:
                since_hooks = 0
                for hook in hooks:
                    new = hook(self)
                    if new:
                        self.run_batch(new)
                        added.extend(new)
            changed = rules_changed or bool(added)
            n = self.size()
            if n > limits.node_limit:
                rep.stop_reason = "node-limit"
                rep.stop_detail = (
                    f"round {rep.iterations + 1} grew the e-graph to {n} e-nodes "
                    f"(limit {limits.node_limit}); that round was rolled back"
                )
                self._replay(cmds, history)
                break
            history.append(added)
            rep.iterations += 1
            rep.rule_matches.update(matches)
            for rule, k in matches.items():  # not `n`: that is the round's e-node count
                (rep.rewrite_matches if self.declared.is_rewrite(rule) else rep.analysis_matches)[rule] += k
            rep.enodes = n
            rep.rounds.append({"round": rep.iterations, "enodes": n, "time_s": round(time.perf_counter() - tr, 4),
                               "rules_s": round(rules_s, 4), "hooks": ran_hooks})
            if progress:
                progress(f"round {rep.iterations}: {n} e-nodes, {sum(matches.values())} rule matches"
                         + (f", oracle {time.perf_counter() - tr - rules_s:.2f} s" if ran_hooks else ""))
            if not changed:
                rep.stop_reason = "saturated"
                break
        rep.time_s = time.perf_counter() - t0
        return rep

    def _replay(self, cmds: list, history: list[list]) -> None:
        self._pop()
        self._push()
        for added in history:
            if cmds:
                self.run_commands(cmds)
            if added:
                self.run_batch(added)


def _parse(eg: b.EGraph, text: str, path: str, declared: Declared) -> list:
    try:
        return eg.parse_program(text, filename=path)
    except b.EggSmolError as e:
        from eqsat.core.rulefiles import format_egglog_error

        raise RuleError(format_egglog_error(str(e), path, text, declared)) from None


def _load(rule_files: list[Path], default_rules: bool, explain: bool = False) -> _Loaded:
    """A fresh e-graph with the default rule files (the prelude alone without
    `default_rules`), then `rule_files`."""
    eg = b.EGraph()
    declared = Declared()
    schedule: list = []
    transform = None
    if explain:
        from eqsat.core.provenance import Instrumenter

        transform = Instrumenter()
    files = default_rule_files() if default_rules else default_rule_files()[:1]  # the prelude always
    for f in files:
        load_rule_file(eg, f, declared, transform)
        if f == files[0] and (differ := prelude_disagreements(declared.constructors)):
            raise RuleError(f"{display_path(f)} and the op table disagree (a broken install?): " + "; ".join(differ))
    n_default = len(declared.rulesets)
    if declared.default_ruleset_files:  # the default rules name a ruleset for every rule
        raise RuleError(f"{declared.default_ruleset_files[0]}: a rule without :ruleset in the default rules")
    if default_rules:
        sched = rules_dir() / SCHEDULE
        if sched.is_file():
            schedule = _parse(eg, sched.read_text(encoding="utf-8"), display_path(sched), declared)
    base = _Loaded(eg, declared, schedule, [], transform.fact_uses() if transform else {}, transform, n_default)
    return _load_user(base, rule_files, default_rules, share=True) if rule_files else base


def _load_user(base: _Loaded, rule_files: list[Path], default_rules: bool, share: bool = False) -> _Loaded:
    """`rule_files` loaded into `base`'s e-graph (the default rules loaded, the caller has
    pushed it), with what they declare added to a copy of `base`'s declarations (`base` itself
    where `share`); `base` is otherwise left as it was."""
    declared = base.declared if share else copy.deepcopy(base.declared)
    transform = base.transform if share else copy.deepcopy(base.transform)
    for f in rule_files:
        load_rule_file(base.eg, Path(f), declared, transform)
    uses = transform.fact_uses() if transform else {}
    n_default = base.n_default
    # A user's rule written without :ruleset goes to egglog's default ruleset: it runs too.
    user_rulesets = declared.rulesets[n_default:] + ([""] if declared.default_ruleset_files else [])
    # no schedule: the prelude's phases (cleanup, fusion, ...) run where a user's rule joined them
    if not default_rules:
        prelude = {display_path(f) for f in default_rule_files()[:1]}
        user_rulesets = [rs for rs in declared.rulesets[:n_default]
                         if set(declared.rule_files_of.get(rs, [])) - prelude] + user_rulesets
    return _Loaded(base.eg, declared, base.schedule, user_rulesets, uses, transform, n_default)

