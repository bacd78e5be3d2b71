"""The fuzzer that stays in the suite (issue 26): hypothesis-drawn valid models and mutated
invalid inputs through eqsat. `tests/fuzz/README.md` says how it is organised and run."""
