"""Where the folders the package ships live: a source tree's own top-level folder (suites/,
images/: an editable install among them, so that each clone runs its own), else the copy the wheel
carries inside the package (pyproject.toml maps both there, under the same names)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent  # src/convmatrix in a checkout, site-packages/convmatrix in a wheel


def shipped(name: str, marker: str) -> Path:
    """The folder `name`: the checkout's when this package is a source tree's (src/convmatrix) and
    that folder holds `marker`, else the package's own copy."""
    checkout = PACKAGE.parents[1] / name
    if PACKAGE.parent.name == "src" and (checkout / marker).is_file():
        return checkout
    return PACKAGE / name
