"""Tools for rule authors: listing rules, checking them for soundness by testing."""
