"""A cell: one stack to run the suite on. The GPU is not part of it; results are keyed by (cell, gpu)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from convmatrix.matrix import knobs as knob_sets
from convmatrix.matrix import stacks
from convmatrix.matrix.values import FROM_IMAGE, IMAGE, slug

HOST_ID = "host"
# Matrix cell ids (Cell.id) spelled short: the lane as two letters, the axis prefixes dropped. The
# report and the live progress line both name a cell this way.
_MATRIX_ID = re.compile(r"^(?P<lane>baremetal|container)-torch(?P<torch>[^-]+)-(?P<cuda>[^-]+)"
                        r"-cudnn(?P<cudnn>[^-]+)-py(?P<python>[^-]+)(?:-(?P<base>.+))?$")
SHORT_LANES = {"baremetal": "bm", "container": "ct"}
# The engines a container cell can be run by ([container].engine, --engine; run/lanes/containers.py).
ENGINES = ("docker", "podman")


@dataclass(frozen=True, kw_only=True)
class Cell:
    lane: str
    torch: str = ""
    cuda: str = ""
    cudnn: str = ""
    python: str = ""
    base: str = ""
    base_in_id: bool = False  # set when base is a matrix axis, so ids stay unique
    flavour: str = ""  # container cells: "wheel" (torch from wheels) or "system" (the base's own torch)
    knobs: str = ""  # the remedy knob set, canonical (knobs.py); "" = the suite's defaults
    # container cells: the engine that runs them ("docker" or "podman"); not part of the stack, so
    # not of the id or the axis values: the same cell through another engine is the same cell.
    engine: str = ""

    @property
    def cuda_stack(self) -> bool:
        """A stack built for CUDA (cu124, ...): on a runner without a GPU its suite runs on the CPU,
        which tells nothing of cuDNN (run/orchestrate refuses that unless asked: --allow-cpu)."""
        return self.lane != "host" and self.cuda.startswith("cu")

    @property
    def id(self) -> str:
        return self.stack_id + knob_sets.parse(self.knobs).suffix  # "+pad8": the same stack, other knobs

    @property
    def stack_id(self) -> str:
        """The id without the knob suffix: what the stack is, whatever options the suite runs with."""
        if self.lane == "host":
            return HOST_ID
        if self.from_image():
            return self.image_stack_id()
        cell_id = f"{self.lane}-torch{self.torch}-{self.cuda}-cudnn{self.cudnn}-py{self.python}"
        return f"{cell_id}-{slug(self.base)}" if self.base_in_id else cell_id

    def from_image(self) -> tuple[str, ...]:
        """The stack fields this cell takes from its base image instead of requesting them."""
        return tuple(k for k in FROM_IMAGE if getattr(self, k) == IMAGE)

    def image_stack_id(self) -> str:
        """The id of a cell whose stack (some of it) is its base's: what it requests, then the
        base, which is what tells it apart (container-nvcr.io-nvidia-pytorch-24.10-py3)."""
        asked = [f"{prefix}{value}" for prefix, value in (("torch", self.torch), ("", self.cuda),
                 ("cudnn", self.cudnn), ("py", self.python)) if value != IMAGE]
        return "-".join([self.lane, *asked, slug(self.base)])

    def values(self) -> dict[str, str]:
        """The axis values, for matching include/exclude/control tables and for cell.json."""
        data = asdict(self)
        del data["base_in_id"]
        del data["engine"]
        if not self.flavour:
            del data["flavour"]
        if not self.knobs:
            del data["knobs"]  # cells of a matrix without the knobs axis keep their record
        return data

    def expected_cudnn(self) -> str:
        """The cuDNN version this cell should load: the override, or the wheel's pin ("" = unknown)."""
        if self.cuda == "cpu" or self.lane == "host" or self.flavour == "system" or self.cudnn == IMAGE:
            return ""  # a system image's cuDNN is whatever its base carries
        if self.cudnn != "bundled":
            return self.cudnn
        release = stacks.load().release(self.torch)
        return release.cudnn_pins.get(self.cuda, "") if release else ""

    def expected(self) -> dict[str, object]:
        """The observed stack this cell must show: torch version, torch.version.cuda, cuDNN int.
        What it takes from its image is not expected (not checked), only observed."""
        if self.lane == "host":
            return {}
        cudnn = self.expected_cudnn()
        expected = {
            "torch": self.torch,
            "cuda": stacks.cuda_version(self.cuda) if self.cuda != IMAGE else None,
            "cudnn": stacks.cudnn_int(cudnn) if cudnn else None,
        }
        return {k: v for k, v in expected.items() if k not in self.from_image()}


def abbreviate(cell_id: str) -> str:
    """baremetal-torch2.5.1-cu124-cudnnbundled-py3.11 -> bm-2.5.1-cu124-bundled-py3.11; other ids as they are."""
    found = _MATRIX_ID.match(cell_id)
    if not found:
        return cell_id
    parts = [SHORT_LANES[found["lane"]], found["torch"], found["cuda"], found["cudnn"], f"py{found['python']}"]
    return "-".join(parts + ([found["base"]] if found["base"] else []))
