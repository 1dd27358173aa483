"""The convmatrix command, one module per subcommand; cli.main parses and dispatches.

The face exports nothing (a `main` here would hide the module cli/main.py): the entry point is
convmatrix.cli.main:main."""
