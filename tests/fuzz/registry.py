"""Every fuzz property by name: its strategies, its body and its example count in the suite.
The test modules and the campaign (tests/fuzz/campaign.py) build their tests from here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from . import invalid_props, mutate_model, profiles, scenarios, valid_props
from .strategies import cases


@dataclass(frozen=True)
class Property:
    strategies: tuple
    body: Callable
    ci_examples: int  # examples in the suite's run (profiles.ci)


PROPERTIES: dict[str, Property] = {
    "optimize_keeps_outputs": Property((cases(),), valid_props.optimize_keeps_outputs, 40),
    "cli_keeps_outputs": Property(
        (cases(), st.lists(st.sampled_from(["--report", "--save-egraph", "--plan"]), unique=True, max_size=3)),
        valid_props.cli_keeps_outputs, 10),
    "opaque_ops_kept": Property((cases(custom=True), st.booleans(), st.booleans()), valid_props.opaque_ops_kept, 10),
    "model_file_is_clean": Property(
        (st.one_of(mutate_model.corrupt_bytes(), mutate_model.broken_protos()),
         st.sampled_from(sorted(invalid_props.COMMANDS))),
        invalid_props.model_file_is_clean, 30),
}


def _scenario_property(name: str, strategy, ci_examples: int) -> None:
    def body(scenario):
        invalid_props.scenario_is_clean(scenario, name)

    body.__name__ = body.__qualname__ = name  # the example database's key
    PROPERTIES[name] = Property((strategy,), body, ci_examples)


_scenario_property("external_data_is_clean", scenarios.external_data(), 20)
_scenario_property("rule_file_is_clean", scenarios.rule_files(), 15)
_scenario_property("egraph_file_is_clean", scenarios.egraph_files(), 20)
_scenario_property("environment_is_clean", scenarios.environments(), 6)
_scenario_property("arguments_are_clean", scenarios.arguments(), 25)


def make_test(name: str, settings=None) -> Callable:
    """The hypothesis test of property `name` under `settings` (default: profiles.ci)."""
    p = PROPERTIES[name]
    return (settings or profiles.ci(p.ci_examples))(given(*p.strategies)(p.body))
