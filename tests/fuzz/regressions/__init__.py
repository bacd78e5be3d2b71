"""Regression tests of failures the fuzzer found, once fixed (each module says what it
showed); tests/fuzz/pending holds those that still wait for a fix."""
