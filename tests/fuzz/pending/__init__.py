"""Pending regression tests (README.md): not collected until renamed test_*.py."""
