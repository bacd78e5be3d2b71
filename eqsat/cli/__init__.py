"""The command line: one module per command; shared arguments in args.py."""
