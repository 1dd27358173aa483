"""The suite's vocabulary: the ops, dtypes, memory formats, layouts and directions a case may name.

Apart from catalog.py, which builds every case (a tenth of a second), so that what only checks a
name against the vocabulary (the report's known-issues file, results/known.py) loads this alone.
catalog.py takes its names from here; standard library only.
"""

from __future__ import annotations

SPATIAL_DIMS = {
    "conv1d": 1,
    "conv2d": 2,
    "conv3d": 3,
    "conv_transpose1d": 1,
    "conv_transpose2d": 2,
    "conv_transpose3d": 3,
}
# float64: cuDNN has double convolutions (CUDNN_DATA_DOUBLE), which real reports hit (scientific
# and physics codes); the reference is float64 too, so tolerance.py counts its rounding twice.
DTYPES = ("float32", "float16", "bfloat16", "float64")
# The memory format a case asks for, and the spatial rank it needs (None: any).
MEMORY_FORMATS = {"contiguous": None, "channels_last": 2, "channels_last_3d": 3}
# Non-contiguous input layouts: same values, other strides. nhwc_strided: the input a model makes
# with x.permute(0, 3, 1, 2) of a channels-last (N, H, W, C) tensor, its weight left NCHW (a
# channels_last memory format would put the weight in channels_last too).
LAYOUTS = (None, "permuted", "sliced", "transposed", "nhwc_strided")
# What a case differentiates: nothing, input and weight (`backward`), one of them (the dgrad and
# wgrad paths alone), or the gradient of grad_input again (a gradient penalty: WGAN-GP, R1).
DIRECTIONS = ("forward", "backward", "backward_input", "backward_weight", "double_backward")
# More elements than this in one tensor: past 32-bit indexing (PyTorch's canUse32BitIndexMath).
INT32_MAX = 2**31 - 1
