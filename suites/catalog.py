"""The convolution cases of the suite, declared as data.

This module imports neither torch nor pytest, so that any tool can read the catalog.
A case id is derived from the fields and is the stable key of a result across stacks:
renaming a case breaks comparisons with older runs, so change ids only on purpose.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Tuple, Union

Size = Union[int, Tuple[int, ...]]

SPATIAL_DIMS = {
    "conv1d": 1,
    "conv2d": 2,
    "conv3d": 3,
    "conv_transpose1d": 1,
    "conv_transpose2d": 2,
    "conv_transpose3d": 3,
}
DTYPES = ("float32", "float16", "bfloat16")
AUTOCAST_DTYPES = (None, "float16", "bfloat16")
# The memory format a case asks for, and the spatial rank it needs (None: any).
MEMORY_FORMATS = {"contiguous": None, "channels_last": 2, "channels_last_3d": 3}
# Non-contiguous input layouts: same values, other strides.
LAYOUTS = (None, "permuted", "sliced", "transposed")
_SHORT_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def _fmt(value: Size) -> str:
    """1 -> "1"; (1, 7) -> "1x7"."""
    if isinstance(value, int):
        return str(value)
    return "x".join(str(v) for v in value)


def _is_default(value: Size, default: int) -> bool:
    if isinstance(value, int):
        return value == default
    return all(v == default for v in value)


@dataclass(frozen=True)
class Case:
    op: str
    n: int
    c_in: int
    c_out: int
    size: Size
    kernel: Size
    source: str
    stride: Size = 1
    padding: Size = 0
    dilation: Size = 1
    groups: int = 1
    dtype: str = "float32"
    autocast: str | None = None
    memory_format: str = "contiguous"
    layout: str | None = None
    backward: bool = False

    def __post_init__(self) -> None:
        problems = self._problems()
        if problems:
            raise ValueError(f"bad case {self!r}: {'; '.join(problems)}")

    def _problems(self) -> list[str]:
        problems = []
        if self.op not in SPATIAL_DIMS:
            problems.append("unknown op " + self.op)
            return problems
        if self.dtype not in DTYPES:
            problems.append("unknown dtype " + self.dtype)
        if self.autocast not in AUTOCAST_DTYPES:
            problems.append(f"unknown autocast dtype {self.autocast}")
        if self.autocast is not None and self.dtype != "float32":
            problems.append("autocast cases take float32 inputs")
        if self.memory_format not in MEMORY_FORMATS:
            problems.append("unknown memory format " + self.memory_format)
        elif MEMORY_FORMATS[self.memory_format] not in (None, self.spatial_dims):
            problems.append(self.memory_format + " needs another spatial rank")
        if self.layout not in LAYOUTS:
            problems.append(f"unknown layout {self.layout}")
        if self.layout is not None and self.memory_format != "contiguous":
            problems.append("a layout tweak applies to contiguous inputs only")
        if self.layout == "transposed" and (self.n < 2 or self.c_in < 2):
            problems.append("a transposed layout needs n >= 2 and c_in >= 2")
        if self.c_in % self.groups or self.c_out % self.groups:
            problems.append("channels must divide by groups")
        for name in ("size", "kernel", "stride", "padding", "dilation"):
            value = getattr(self, name)
            if not isinstance(value, int) and len(value) != self.spatial_dims:
                problems.append(name + " has the wrong rank")
        return problems

    @property
    def spatial_dims(self) -> int:
        return SPATIAL_DIMS[self.op]

    @property
    def transposed(self) -> bool:
        return self.op.startswith("conv_transpose")

    @property
    def compute_dtype(self) -> str:
        """The dtype the convolution runs in: the autocast dtype when there is one."""
        return self.autocast or self.dtype

    def expand(self, value: Size) -> tuple[int, ...]:
        """An int or per-dimension tuple as one int per spatial dimension."""
        if isinstance(value, int):
            return (value,) * self.spatial_dims
        return tuple(value)

    @property
    def id(self) -> str:
        parts = [self.op, _SHORT_DTYPE[self.dtype]]
        if self.autocast:
            parts.append("autocast_" + _SHORT_DTYPE[self.autocast])
        parts.append("k" + _fmt(self.kernel))
        for prefix, value, default in (("s", self.stride, 1), ("p", self.padding, 0),
                                       ("d", self.dilation, 1)):
            if not _is_default(value, default):
                parts.append(prefix + _fmt(value))
        if self.groups == self.c_in and self.groups > 1:
            parts.append("dw")
        elif self.groups > 1:
            parts.append("g" + str(self.groups))
        if self.memory_format != "contiguous":
            parts.append(self.memory_format)
        if self.layout:
            parts.append(self.layout)
        if self.backward:
            parts.append("bwd")
        return "-".join(parts)

    def params(self) -> dict[str, Any]:
        """The fields as plain JSON values (tuples become lists)."""
        return {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in dataclasses.asdict(self).items()
        }


CASES: tuple[Case, ...] = (
    # conv1d
    Case("conv1d", 2, 8, 16, 32, 3, padding=1, source="baseline 1d conv, fp32"),
    Case("conv1d", 2, 8, 8, 33, 5, stride=2, dilation=2, dtype="float16",
         source="strided, dilated fp16 1d conv (audio front ends)"),
    Case("conv1d", 2, 16, 16, 32, 7, padding=3, groups=16, dtype="bfloat16",
         source="depthwise bf16 1d conv (ConvNeXt-style/Mamba-style short conv)"),
    Case("conv1d", 2, 8, 12, 40, 3, layout="permuted", backward=True,
         source="input permuted from (N, L, C), the usual transformer layout, with backward"),
    Case("conv1d", 2, 8, 8, 32, 3, padding=1, autocast="float16",
         source="1d conv under fp16 autocast"),
    # conv2d
    Case("conv2d", 2, 8, 16, (12, 12), 3, padding=1, source="baseline 2d conv, fp32"),
    Case("conv2d", 2, 8, 16, (13, 13), 3, stride=2, dtype="float16", memory_format="channels_last",
         source="strided fp16 conv in channels_last (typical AMP vision training)"),
    Case("conv2d", 2, 8, 8, (10, 10), 3, padding=1, dtype="bfloat16", memory_format="channels_last",
         backward=True, source="bf16 channels_last conv with backward"),
    Case("conv2d", 2, 16, 16, (10, 10), 3, padding=1, groups=4, backward=True,
         source="grouped conv (ResNeXt) with backward"),
    Case("conv2d", 2, 16, 16, (12, 12), 3, padding=1, groups=16, dtype="float16",
         memory_format="channels_last",
         source="depthwise fp16 channels_last (MobileNet/EfficientNet), a common cuDNN corner"),
    Case("conv2d", 2, 8, 8, (14, 14), 3, padding=2, dilation=2,
         source="dilated conv (DeepLab-style atrous)"),
    Case("conv2d", 2, 8, 8, (10, 10), 3, padding=1, layout="sliced",
         source="input sliced along width: strided, non-contiguous"),
    Case("conv2d", 3, 8, 8, (10, 10), 3, layout="transposed",
         source="input with N and C swapped in memory"),
    Case("conv2d", 2, 8, 16, (12, 12), 3, padding=1, autocast="float16", backward=True,
         source="fp16 autocast forward and backward (torch.amp training step)"),
    Case("conv2d", 2, 16, 32, (8, 8), 1, autocast="bfloat16", memory_format="channels_last",
         source="1x1 pointwise conv under bf16 autocast, channels_last"),
    Case("conv2d", 2, 3, 8, (32, 32), 7, stride=2, padding=3, dtype="float16", backward=True,
         source="ResNet stem: 7x7 stride 2 on 3 channels, fp16 with backward"),
    Case("conv2d", 2, 8, 8, (16, 16), 5, padding=4, dilation=2, groups=8, dtype="bfloat16",
         source="dilated depthwise bf16 conv"),
    Case("conv2d", 2, 8, 8, (12, 12), (1, 7), padding=(0, 3),
         source="asymmetric 1x7 kernel (Inception-style)"),
    # conv3d
    Case("conv3d", 2, 4, 8, (6, 6, 6), 3, padding=1, source="baseline 3d conv, fp32"),
    Case("conv3d", 2, 4, 8, (6, 6, 6), 3, padding=1, dtype="float16",
         memory_format="channels_last_3d",
         source="fp16 3d conv in channels_last_3d (video/medical models)"),
    Case("conv3d", 2, 4, 4, (7, 7, 7), 3, stride=2, dtype="bfloat16", backward=True,
         source="strided bf16 3d conv with backward"),
    Case("conv3d", 2, 8, 8, (5, 5, 5), 3, padding=1, groups=2, autocast="bfloat16",
         source="grouped 3d conv under bf16 autocast"),
    # transposed
    Case("conv_transpose1d", 2, 8, 4, 16, 3, stride=2,
         source="1d transposed conv upsampling, fp32"),
    Case("conv_transpose1d", 2, 8, 8, 16, 4, stride=2, padding=1, dtype="float16",
         source="fp16 1d transposed conv (vocoder upsampling)"),
    Case("conv_transpose2d", 2, 8, 4, (8, 8), 4, stride=2, padding=1, backward=True,
         source="2x upsampling transposed conv (GAN/U-Net decoder) with backward"),
    Case("conv_transpose2d", 2, 8, 8, (8, 8), 2, stride=2, dtype="float16",
         memory_format="channels_last",
         source="fp16 channels_last transposed conv (U-Net up path)"),
    Case("conv_transpose2d", 2, 8, 8, (8, 8), 3, padding=1, groups=2, dtype="bfloat16",
         source="grouped bf16 transposed conv"),
    Case("conv_transpose2d", 2, 8, 8, (8, 8), 4, stride=2, padding=1, autocast="float16",
         backward=True, source="transposed conv under fp16 autocast with backward"),
    Case("conv_transpose3d", 2, 4, 4, (4, 4, 4), 3, stride=2, source="3d transposed conv, fp32"),
    Case("conv_transpose3d", 2, 4, 4, (4, 4, 4), 2, stride=2, dtype="float16",
         memory_format="channels_last_3d", source="fp16 channels_last_3d 3d transposed conv"),
)


def _check_unique(cases: tuple[Case, ...]) -> None:
    seen: dict[str, Case] = {}
    for case in cases:
        if case.id in seen:
            raise ValueError(f"duplicate case id {case.id}: {seen[case.id]!r} and {case!r}")
        seen[case.id] = case


_check_unique(CASES)
