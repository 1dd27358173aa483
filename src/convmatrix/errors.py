"""Error classes that carry their own exit code (docs/contracts.md: Exit codes).

Raised wherever the failure is found and printed once, as `convmatrix: <message>`, by the entry
point (cli.main; the nox sessions run `convmatrix`).
"""

from __future__ import annotations


class ConvmatrixError(Exception):
    """A failure the CLI reports as one line (a line per problem), with this class's exit code."""

    exit_code = 1

    def lines(self) -> list[str]:
        # "\n" only: a U+2028 or U+0085 inside a cell id must not start a line of its own.
        return str(self).split("\n") if str(self) else [type(self).__name__]


class NotGreen(ConvmatrixError):
    """The report found what --fail-on names (a regression, the signature) or an INVALID cell."""

    exit_code = 1


class BadInput(ConvmatrixError):
    """A bad matrix, unreadable results or bad arguments: the message names the file and field."""

    exit_code = 2


class UnhealthyControl(ConvmatrixError):
    """The control did not run cleanly, so no verdict can be given."""

    exit_code = 3


class InfrastructureError(ConvmatrixError):
    """The machine, not the input: the Docker engine is down, a build or an install failed."""

    exit_code = 4
    # The install, build or engine log that says why, where there is one: the harness records the
    # first decisive line of it as the cell's cause (results/infra.py).
    log: str | None = None
    cause: object = None  # the harness's classification of it (results/infra.RootCause), once made

    def with_log(self, log: object) -> InfrastructureError:
        self.log = str(log)
        return self
