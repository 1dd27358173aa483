"""Error classes that carry their own exit code (DESIGN.md: Harness CLI contract)."""

from __future__ import annotations


class ConvmatrixError(Exception):
    """A failure the CLI reports as one line, with this class's exit code."""

    exit_code = 1


class BadInput(ConvmatrixError):
    """A bad matrix, unreadable results or bad arguments: the message names the file and field."""

    exit_code = 2


class UnhealthyControl(ConvmatrixError):
    """The control did not run cleanly, so no verdict can be given."""

    exit_code = 3
