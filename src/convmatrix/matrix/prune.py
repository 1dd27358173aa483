"""Why a combination of axis values cannot exist, from the project's stack facts."""

from __future__ import annotations

from convmatrix.matrix import stacks
from convmatrix.matrix.cells import Cell
from convmatrix.matrix.values import IMAGE


def impossible(cell: Cell) -> str | None:
    """The reason this cell's stack was never published or cannot load, or None when it can."""
    if cell.lane == "host":
        return None
    taken = cell.from_image()
    if taken and cell.flavour != "system":
        return (f"{taken[0]} = {IMAGE!r} is for container cells of a system base "
                "([container] flavour = \"system\"): the others install their stack")
    if cell.torch == IMAGE:
        # The image's torch: no facts of ours to check it against, nor its cuDNN pin.
        return _override_package(cell, stacks.load())
    facts = stacks.load()
    release = facts.release(cell.torch)
    if release is None:
        known = ", ".join(facts.releases)
        return f"torch {cell.torch} is not a release convmatrix knows (known: {known})"
    for check in (_patch, _variant, _python, _cudnn):
        reason = check(cell, release, facts)
        if reason:
            return reason
    return None


def _patch(cell: Cell, release: stacks.Release, facts: stacks.Facts) -> str | None:
    if cell.torch in release.patches:
        return None
    return f"torch {cell.torch} was never published (torch {release.minor}: {', '.join(release.patches)})"


def _variant(cell: Cell, release: stacks.Release, facts: stacks.Facts) -> str | None:
    if cell.cuda in (IMAGE, *release.variants) or not release.variants_known:
        return None  # an incomplete variant list prunes nothing
    published = ", ".join(release.variants)
    return f"torch {cell.torch} was never published for {cell.cuda} (published: {published})"


def _python(cell: Cell, release: stacks.Release, facts: stacks.Facts) -> str | None:
    if cell.python == IMAGE:
        return None
    py = stacks.version_key(cell.python)
    too_old = py < stacks.version_key(release.python_min)
    too_new = bool(release.python_max) and py > stacks.version_key(release.python_max)
    if not (too_old or too_new):
        return None
    span = f"{release.python_min}-{release.python_max or '?'}"
    return f"torch {cell.torch} has no wheels for Python {cell.python} (supports {span})"


def _cudnn(cell: Cell, release: stacks.Release, facts: stacks.Facts) -> str | None:
    reason = _override_package(cell, facts)
    if reason or cell.cudnn in ("bundled", IMAGE):
        return reason
    pin = release.cudnn_pins.get(cell.cuda, "")  # a variant of an incomplete list: its pin is unknown
    if not pin:
        return None
    want, have = stacks.version_key(pin)[:2], stacks.version_key(cell.cudnn)[:2]
    if want[0] != have[0]:
        return f"cuDNN {cell.cudnn} is major {have[0]}; torch {cell.torch}+{cell.cuda} pins {pin}"
    if have < want:
        # torch/backends/cudnn checks: the runtime minor must not be older than the build's.
        return f"cuDNN {cell.cudnn} is older than the {pin} torch {cell.torch}+{cell.cuda} was built with"
    return None


def _override_package(cell: Cell, facts: stacks.Facts) -> str | None:
    """Why a cuDNN override cannot be installed at all (no package for it), or None."""
    if cell.cudnn in ("bundled", IMAGE):
        return None
    if cell.cuda == IMAGE:
        return f"a cuDNN override needs a CUDA variant: cuda = {IMAGE!r} names no nvidia-cudnn-cuXX"
    if cell.cuda == "cpu":
        return "a cuDNN override on a cpu wheel: cpu builds load no cuDNN"
    package = stacks.cudnn_package(cell.cuda)
    if cell.cudnn not in facts.cudnn_wheels.get(package, ()):
        return f"{package}=={cell.cudnn} is not a published version known to convmatrix"
    return None
