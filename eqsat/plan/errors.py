"""The planner's own error: a plan that does not hold (checker, proof by execution) or a
model it cannot plan. An EqsatError, so the CLI prints it as one line and exits 1; bad
usage (an unbound symbolic dimension) is eqsat.errors.UsageError (exit 2)."""

from __future__ import annotations

from eqsat.errors import EqsatError


class PlanError(EqsatError):
    exit_code = 1
