"""Reading and writing models and files: atomic outputs, external data, quiet native calls."""
