"""Targets eqsat optimizes for."""
