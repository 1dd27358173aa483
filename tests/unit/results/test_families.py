"""Failure-family classification (src/convmatrix/results/families.py) against real-world messages.

The corpus quotes error texts as users reported them (the URL above each entry is where). Where
no public report carries a text verbatim (cuDNN 9 sub-codes inside PyTorch's message templates),
the entry says "derived" and names the template it was derived from. Every corpus entry is also
fed through the manglings that logs apply (ANSI colours, CRLF, torchrun and logger prefixes,
fixed-width wrapping) and must keep its family: that is what keeps siblings out of the signature
however the text arrives.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from convmatrix.results.families import (
    FAMILIES,
    INFRASTRUCTURE,
    PRECEDENCE,
    SIGNATURE,
    classify,
    classify_warnings,
    normalize,
)


@dataclass(frozen=True)
class Case:
    id: str
    message: str
    expected: str
    status: str = "failed"
    exc_type: str | None = None


# PyTorch's per-plan warning, as printed by torch 2.3 (the signature text this project hunts).
PLAN_WARNING = (
    "UserWarning: Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: "
    "cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED (Triggered "
    "internally at ../aten/src/ATen/native/cudnn/Conv_v8.cpp:919.)\n"
    "  return F.conv2d(input, weight, bias, self.stride,"
)

CORPUS: list[Case] = [
    # ---- cudnn_not_supported: the signature ----------------------------------------------------
    # https://github.com/pytorch/pytorch/issues/88380
    Case(
        "not_supported-noncontiguous-hint",
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you "
        "passed in a non-contiguous input.",
        SIGNATURE,
    ),
    # https://github.com/pytorch/pytorch/issues/1664
    Case(
        "not_supported-torch0.x",
        "RuntimeError: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
        SIGNATURE,
    ),
    # https://github.com/pytorch/pytorch/issues/11065 (wrapped by the reporter's terminal)
    Case(
        "not_supported-terminal-wrapped",
        "    306     def forward(self, input):\n"
        "    307         return F.conv2d(input, self.weight, self.bias, self.stride,\n"
        "--> 308                         self.padding, self.dilation, self.groups)\n"
        "\n"
        "RuntimeError: CuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you "
        "passed in a n\non-contiguous input.",
        SIGNATURE,
    ),
    # https://github.com/ultralytics/ultralytics/issues/12606 -- the warning alone, escalated to
    # an error by warnings-as-errors: the only evidence there is, so it decides.
    Case("not_supported-plan-warning-as-error", PLAN_WARNING, SIGNATURE, exc_type="UserWarning"),
    # https://github.com/facebookarchive/caffe2/issues/1526 (CUDNN_STATUS_SUCCESS is no failure)
    Case(
        "not_supported-caffe2-enforce",
        "what():  [enforce fail at conv_op_cudnn.cc:580] status == CUDNN_STATUS_SUCCESS. 9 vs 0. , "
        "Error at: /home/paul/.libs/caffe2/caffe2/operators/conv_op_cudnn.cc:580: "
        "CUDNN_STATUS_NOT_SUPPORTED Error from operator: ",
        SIGNATURE,
    ),
    # https://github.com/microsoft/onnxruntime/issues/15715
    Case(
        "not_supported-onnxruntime",
        "2023-04-27 09:30:07.687265610 [E:onnxruntime:log, cuda_call.cc:119 CudaCall] CUDNN "
        "failure 9: CUDNN_STATUS_NOT_SUPPORTED ; GPU=0 ; hostname=images-generation-triton-backend"
        "-test-c5f9949d-cgxz2 ; expr=cudnnSetTensorNdDescriptor(tensor_, dataType, "
        "static_cast<int>(rank), dims.data(), strides.data()); ",
        SIGNATURE,
    ),
    # https://github.com/chuckcho/video-caffe/issues/26
    Case(
        "not_supported-glog-check",
        "F0628 23:51:23.015211 16220 cudnn_ndconv_layer.cu:184] Check failed: status == "
        "CUDNN_STATUS_SUCCESS (9 vs. 0)  CUDNN_STATUS_NOT_SUPPORTED",
        SIGNATURE,
    ),
    # https://github.com/fmassa/object-detection.torch/issues/19
    Case(
        "not_supported-lua",
        "/scratch2/peng/torch/install/share/lua/5.1/cudnn/init.lua:58: ## Error in CuDNN: "
        "CUDNN_STATUS_NOT_SUPPORTED (cudnnSetFilterNdDescriptor)",
        SIGNATURE,
    ),
    # derived: PyTorch's "cuDNN error: <cudnnGetErrorString>" template (pytorch#88380 above) with
    # the cuDNN 9 sub-code names of cudnn_graph.h (cudnnStatus_t, cuDNN 9.0+)
    Case(
        "not_supported-cudnn9-shape",
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED_SHAPE",
        SIGNATURE,
    ),
    # derived: the cudnn_frontend exception text of the plan warning above, as the primary error
    Case(
        "not_supported-cudnn9-graph-pattern-frontend",
        "RuntimeError: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed "
        "cudnn_status: CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN",
        SIGNATURE,
    ),
    # ---- cudnn_no_engine ---------------------------------------------------------------------
    # https://github.com/facebookresearch/dinov2/issues/158
    Case(
        "no_engine-get",
        "RuntimeError: GET was unable to find an engine to execute this computation",
        "cudnn_no_engine",
    ),
    # https://github.com/facebookresearch/vggt/issues/183
    Case(
        "no_engine-find",
        "RuntimeError: FIND was unable to find an engine to execute this computation",
        "cudnn_no_engine",
    ),
    # https://github.com/ostris/ai-toolkit/issues/203
    Case(
        "no_engine-frontend-support-graph",
        "RuntimeError: cuDNN Frontend error: [cudnn_frontend] Error: No execution plans support the graph",
        "cudnn_no_engine",
    ),
    # https://github.com/NVIDIA/cudnn-frontend/issues/75
    Case(
        "no_engine-frontend-built",
        "cudnn._compiled_module.cudnnGraphNotSupportedError: [cudnn_frontend] Error: No execution "
        "plans built successfully.",
        "cudnn_no_engine",
    ),
    # https://github.com/ultralytics/ultralytics/issues/12606 + dinov2#158: the exception that
    # ends the case after cuDNN's per-plan NOT_SUPPORTED warnings. The warnings must not win.
    Case(
        "no_engine-after-plan-warnings",
        f"{PLAN_WARNING}\n{PLAN_WARNING}\nTraceback (most recent call last):\n"
        '  File "repro.py", line 9, in <module>\n    y = conv(x)\n'
        "RuntimeError: GET was unable to find an engine to execute this computation",
        "cudnn_no_engine",
    ),
    # ---- cudnn_no_algorithm ------------------------------------------------------------------
    # https://github.com/zcablii/LSKNet/issues/67
    Case(
        "no_algorithm",
        "RuntimeError: Unable to find a valid cuDNN algorithm to run convolution",
        "cudnn_no_algorithm",
    ),
    # https://github.com/deepakn97/relationPrediction/issues/37
    Case(
        "no_algorithm-try_all",
        "RuntimeError: Unable to find a valid cuDNN algorithm to run convolution (try_all at "
        "/opt/conda/conda-bld/pytorch_1591914868920/work/aten/src/ATen/native/cudnn/Conv.cpp:693)",
        "cudnn_no_algorithm",
    ),
    # https://github.com/gistvision/e2sri/issues/13
    Case(
        "no_algorithm-old-wording",
        "RuntimeError: no valid convolution algorithms available in CuDNN",
        "cudnn_no_algorithm",
    ),
    # ---- cudnn_execution_failed --------------------------------------------------------------
    # https://github.com/pytorch/examples/issues/729
    Case(
        "execution_failed",
        "Exception has occurred: RuntimeError\ncuDNN error: CUDNN_STATUS_EXECUTION_FAILED\n"
        '  File "~\\test_cuda.py", line 22, in forward\n    x = self.conv1(x)',
        "cudnn_execution_failed",
    ),
    # https://github.com/msracver/Deep-Image-Analogy/issues/3 (the reporter's console cut a name)
    Case(
        "execution_failed-glog-broken-name",
        "F0525 12:35:32.850440 182776 cudnn_conv_layer.cu:28] Check failed: status == CUD\n"
        "NN_STATUS_SUCCESS (8 vs. 0)  CUDNN_STATUS_EXECUTION_FAILED\n"
        "*** Check failure stack trace: ***",
        "cudnn_execution_failed",
    ),
    # derived: PyTorch's "cuDNN error: ..." template with a cuDNN 9 sub-code
    Case(
        "execution_failed-cudnn9-cudart",
        "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED_CUDART",
        "cudnn_execution_failed",
    ),
    # ---- cudnn_internal_error ----------------------------------------------------------------
    # https://github.com/TomMao23/multiyolov5/issues/11
    Case(
        "internal_error-repro-snippet",
        "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR\n"
        "You can try to repro this exception using the following code snippet. If that doesn't "
        "trigger the error, please include your original repro script when reporting this issue."
        "\n\nimport torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
        "torch.backends.cudnn.benchmark = True\n"
        "ConvolutionParams\n    data_type = CUDNN_DATA_HALF\n    padding = [0, 0, 0]\n",
        "cudnn_internal_error",
    ),
    # https://github.com/tensorflow/tensorflow/issues/2033
    Case(
        "internal_error-tensorflow",
        "E tensorflow/stream_executor/cuda/cuda_dnn.cc:385] could not create cudnn handle: CUDNN_STATUS_INTERNAL_ERROR",
        "cudnn_internal_error",
    ),
    # ---- cudnn_bad_param ---------------------------------------------------------------------
    # https://github.com/LiheYoung/ST-PlusPlus/issues/38
    Case(
        "bad_param",
        "    return F.conv2d(input, weight, self.bias, self.stride,\nRuntimeError: cuDNN error: CUDNN_STATUS_BAD_PARAM",
        "cudnn_bad_param",
    ),
    # https://github.com/NVIDIA/apex/issues/1140 (old cudnn_frontend printed the number: 3)
    Case(
        "bad_param-numeric-status",
        "[ERROR] Exception CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed cudnn_status: 3",
        "cudnn_bad_param",
    ),
    # https://github.com/nvidia-cosmos/cosmos-transfer1/issues/193 (cuDNN API log line)
    Case(
        "bad_param-api-log",
        "Error: CUDNN_STATUS_BAD_PARAM; Reason: finalize_internal()",
        "cudnn_bad_param",
    ),
    # ---- cudnn_mapping_error -----------------------------------------------------------------
    # https://github.com/pytorch/pytorch/issues/27588
    Case(
        "mapping_error",
        "    allow_unreachable=True)  # allow_unreachable flag\n\n"
        "RuntimeError: cuDNN error: CUDNN_STATUS_MAPPING_ERROR",
        "cudnn_mapping_error",
    ),
    # https://github.com/spcl/ucudnn/issues/3
    Case(
        "mapping_error-tensorflow",
        "2019-09-06 17:04:48.845766: F tensorflow/stream_executor/cuda/cuda_dnn.cc:2294] failed "
        "to set stream for cudnn handle: CUDNN_STATUS_MAPPING_ERROR\nAborted (core dumped)",
        "cudnn_mapping_error",
    ),
    # ---- cudnn_arch_mismatch -----------------------------------------------------------------
    # https://github.com/pytorch/pytorch/issues/20202
    Case(
        "arch_mismatch",
        "RuntimeError: cuDNN error: CUDNN_STATUS_ARCH_MISMATCH",
        "cudnn_arch_mismatch",
    ),
    # https://github.com/rbgirshick/fast-rcnn/issues/44
    Case(
        "arch_mismatch-glog",
        "F0817 22:53:22.694056 24820 cudnn_conv_layer.cpp:32] Check failed: status == "
        "CUDNN_STATUS_SUCCESS (6 vs. 0)  CUDNN_STATUS_ARCH_MISMATCH\n"
        "*** Check failure stack trace: ***\nAborted (core dumped)",
        "cudnn_arch_mismatch",
    ),
    # derived: the cuDNN 9 sub-code that replaced ARCH_MISMATCH, in PyTorch's template. A
    # NOT_SUPPORTED_* name, yet not the signature: the GPU lacks the feature.
    Case(
        "arch_mismatch-cudnn9-subcode",
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH",
        "cudnn_arch_mismatch",
    ),
    # ---- cudnn_not_initialized ---------------------------------------------------------------
    # https://github.com/deepseek-ai/DeepSeek-VL/issues/30
    Case(
        "not_initialized",
        "    return F.conv2d(input, weight, bias, self.stride,\n"
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED",
        "cudnn_not_initialized",
    ),
    # ---- cudnn_version_mismatch --------------------------------------------------------------
    # https://github.com/pytorch/pytorch/pull/81881
    Case(
        "version_mismatch-incompatibility",
        "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 3, 2) but "
        "found runtime version (8, 0, 3). PyTorch already comes bundled with cuDNN. One option to "
        "resolving this error is to ensure PyTorch can find the bundled cuDNN.Looks like your "
        "LD_LIBRARY_PATH contains incompatible version of cudnnPlease either remove it from the "
        "path or install cudnn (8, 3, 2)",
        "cudnn_version_mismatch",
    ),
    # https://github.com/jwyang/faster-rcnn.pytorch/issues/662
    Case(
        "version_mismatch-old-wording",
        "RuntimeError: cuDNN version mismatch: PyTorch was compiled against 7102 but linked against 7600",
        "cudnn_version_mismatch",
    ),
    # https://github.com/mav-rik/facerestore_cf/issues/27
    Case(
        "version_mismatch-cudnn9-sublibrary",
        "CropFace\ncuDNN error: CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
        "cudnn_version_mismatch",
    ),
    # ---- cudnn_library_missing ---------------------------------------------------------------
    # https://github.com/OpenTalker/SadTalker/issues/323
    Case(
        "library_missing-cudnn8",
        "Could not load library libcudnn_cnn_infer.so.8. Error: libcuda.so: cannot open shared "
        "object file: No such file or directory\n"
        "Please make sure libcudnn_cnn_infer.so.8 is in your library path!",
        "cudnn_library_missing",
    ),
    # https://github.com/jhj0517/Whisper-WebUI/issues/294
    Case(
        "library_missing-cudnn8-ops",
        "Could not load library libcudnn_ops_infer.so.8. Error: libcudnn_ops_infer.so.8: cannot "
        "open shared object file: No such file or directory",
        "cudnn_library_missing",
    ),
    # https://github.com/m-bain/whisperX/issues/1297 (docker compose prefixes every line)
    Case(
        "library_missing-cudnn9-compose",
        "factory  | Unable to load any of {libcudnn_cnn.so.9.1.0, libcudnn_cnn.so.9.1, "
        "libcudnn_cnn.so.9, libcudnn_cnn.so}\n"
        "factory  | Invalid handle. Cannot load symbol cudnnCreateConvolutionDescriptor",
        "cudnn_library_missing",
    ),
    # https://github.com/ultralytics/ultralytics/issues/17170 (missing engines sublibrary, then a
    # cuDNN failure that is only its symptom)
    Case(
        "library_missing-then-finalize-failed",
        "Unable to load any of {libcudnn_engines_precompiled.so.9.4.0, "
        "libcudnn_engines_precompiled.so.9.4, libcudnn_engines_precompiled.so.9, "
        "libcudnn_engines_precompiled.so}\nTraceback (most recent call last):\n"
        "RuntimeError: CUDNN_BACKEND_TENSOR_DESCRIPTOR cudnnFinalize failed",
        "cudnn_library_missing",
    ),
    # https://github.com/ddean2009/MoneyPrinterPlus/issues/91
    Case(
        "library_missing-windows-dll",
        "Could not locate cudnn_ops64_9.dll. Please make sure it is in your library path!\n"
        "Invalid handle. Cannot load symbol cudnnCreateTensorDescriptor",
        "cudnn_library_missing",
    ),
    # https://github.com/JuliaGPU/CUDA.jl/issues/3205 (cuDNN API log through Julia's logger)
    Case(
        "library_missing-sublibrary-loading-failed",
        "Could not locate cudnn_engines_tensor_ir64_9.dll. Please make sure it is in your library "
        "path!\n"
        "| Warning: CUDNN_STATUS_SUCCESS; Reason: cuDNN Library configuration is set to AUTO. "
        "Automatically configuring the library mode to FULL.\n"
        "| Error: CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED; Reason: xDesc.finalize()",
        "cudnn_library_missing",
    ),
    # The library audit's own lines (suites/libaudit.py judge(), as measured in issue 47 with torch
    # 2.5.1 cu124: nvidia-cudnn-cu12 9.4.0.58 beside 9.2.1.18's folder on LD_LIBRARY_PATH).
    Case(
        "library_missing-audit-without-cudnns-line",
        "LibraryAuditFailure: cuDNN library missing: the loading process exited -11 at "
        "cudnnCnnVersionCheck; cuDNN said: nothing",
        "cudnn_library_missing",
    ),
    Case(
        "library_missing-audit-beside-its-mismatch",
        "cuDNN library missing: the loading process exited -6 at cudnnCnnVersionCheck; cuDNN said: Unable "
        "to load any of {libcudnn_cnn.so.9.4.0, libcudnn_cnn.so.9.4, libcudnn_cnn.so.9, libcudnn_cnn.so}\n"
        "cuDNN version mismatch: libcudnn_cnn.so.9 9.2.1 would load from LD_LIBRARY_PATH (/c/libcudnn_cnn.so.9)"
        " beside libcudnn_graph 9.4.0 (/w/libcudnn_graph.so.9)",
        "cudnn_library_missing",
    ),
    Case(
        "version_mismatch-audit-beside-a-swap",
        "cuDNN version mismatch: libcudnn_engines_tensor_ir.so.9 9.23.0 would load from LD_LIBRARY_PATH "
        "(/n/libcudnn_engines_tensor_ir.so.9) beside libcudnn_graph 9.20.0 (/w/libcudnn_graph.so.9)\n"
        "CUDA library swap: libcublas.so.13 13.1.0 loaded from LD_LIBRARY_PATH (/n/libcublas.so.13)",
        "cudnn_version_mismatch",
    ),
    # ---- cuda_library_swapped (the library audit alone says it) ------------------------------
    Case(
        "library_swapped-audit",
        "LibraryAuditFailure: CUDA library swap: libcudnn_graph.so.9 9.2.1 loaded from LD_LIBRARY_PATH "
        "(/v92/site-packages/nvidia/cudnn/lib/libcudnn_graph.so.9); this interpreter installed "
        "nvidia-cudnn-cu12 9.4.0.58 (/v94/site-packages/nvidia/cudnn/lib/libcudnn_graph.so.9)",
        "cuda_library_swapped",
    ),
    # ---- cuda_no_kernel_image ----------------------------------------------------------------
    # https://github.com/TerryPei/EfficientVMamba/issues/23
    Case(
        "no_kernel_image",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "cuda_no_kernel_image",
    ),
    # https://github.com/pytorch/ELF/issues/99 (torch's too-old-GPU warning; the error is what
    # then failed, see test_torch_gpu_warning_does_not_hide_the_error)
    Case(
        "no_kernel_image-gpu-too-old-warning",
        "Found GPU0 GeForce GTX 550 Ti which is of cuda capability 2.1.\n"
        "    PyTorch no longer supports this GPU because it is too old.",
        "cuda_no_kernel_image",
        exc_type="UserWarning",
    ),
    # ---- cuda_illegal_address ----------------------------------------------------------------
    # https://github.com/pytorch/pytorch/issues/48945
    Case(
        "illegal_address",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "cuda_illegal_address",
    ),
    # https://github.com/aim-uofa/AdelaiDet/issues/97 (a cuDNN status after the sticky error)
    Case(
        "illegal_address-with-cudnn-fallout",
        "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR\n"
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  CUDA error: an illegal memory access was encountered (insert_events at "
        "/opt/conda/conda-bld/pytorch_1587428398394/work/c10/cuda/CUDACachingAllocator.cpp:771)",
        "cuda_illegal_address",
    ),
    # https://github.com/pytorch/pytorch/issues/32893
    Case("misaligned_address", "RuntimeError: CUDA error: misaligned address", "cuda_illegal_address"),
    # ---- cuda_oom ----------------------------------------------------------------------------
    # https://github.com/murong-xu/CADS/issues/4
    Case(
        "oom-torch2",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a "
        "total capacity of 31.47 GiB of which 12.73 GiB is free. Including non-PyTorch memory, "
        "this process has 18.73 GiB memory in use. Of the allocated memory 9.08 GiB is allocated "
        "by PyTorch, and 9.35 GiB is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        "cuda_oom",
    ),
    # https://github.com/pytorch/pytorch/issues/16417
    Case(
        "oom-torch1",
        "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total "
        "capacity; 8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)",
        "cuda_oom",
    ),
    # https://github.com/KupynOrest/DeblurGAN/issues/128
    Case(
        "oom-cudnn-alloc-failed",
        "train.py RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "cuda_oom",
    ),
    # ---- cuda_driver_insufficient ------------------------------------------------------------
    # https://github.com/lllyasviel/Fooocus/issues/1313
    Case(
        "driver_too_old",
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please "
        "update your GPU driver by downloading and installing a new version from the URL: "
        "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to "
        "install a PyTorch version that has been compiled with your version of the CUDA driver.",
        "cuda_driver_insufficient",
    ),
    # https://github.com/open-mmlab/mmskeleton/issues/113
    Case(
        "driver_insufficient-thc",
        "RuntimeError: cuda runtime error (35) : CUDA driver version is insufficient for CUDA "
        "runtime version at /pytorch/aten/src/THC/THCGeneral.cpp:74",
        "cuda_driver_insufficient",
    ),
    # https://github.com/nagadomi/nunif/issues/702
    Case(
        "driver_insufficient",
        "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
        "cuda_driver_insufficient",
    ),
    # ---- cuda_no_device ----------------------------------------------------------------------
    # https://github.com/googlecolab/colabtools/issues/5136
    Case(
        "no_driver",
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
        "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
        "cuda_no_device",
    ),
    # https://github.com/lelechen63/ATVGnet/issues/4
    Case(
        "no_device-thc",
        "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=74 error=38 : no "
        "CUDA-capable device is detected\nTraceback (most recent call last):\n"
        "RuntimeError: cuda runtime error (38) : no CUDA-capable device is detected at "
        "/pytorch/aten/src/THC/THCGeneral.cpp:74",
        "cuda_no_device",
    ),
    # https://github.com/facebookresearch/detectron2/issues/460 (an AssertionError that is not the
    # suite's numeric verdict)
    Case(
        "no_device-cpu-wheel",
        '    raise AssertionError("Torch not compiled with CUDA enabled")\n'
        "AssertionError: Torch not compiled with CUDA enabled",
        "cuda_no_device",
        exc_type="AssertionError",
    ),
    # ---- numeric_mismatch: written by the suite itself (suites/README.md: What it writes) -------
    Case(
        "numeric_mismatch",
        "numeric mismatch: max abs error 0.125 > atol 0.001 (float16, cudnn.benchmark=on)",
        "numeric_mismatch",
        exc_type="AssertionError",
    ),
    Case(
        "numeric_mismatch-typed-message",
        "AssertionError: numeric mismatch: max abs error nan (bfloat16)",
        "numeric_mismatch",
    ),
    # ---- crash, timeout: decided by the status the suite recorded -----------------------------
    Case("crash", "Fatal Python error: Segmentation fault", "crash", status="crashed"),
    Case("timeout", "", "timeout", status="timeout"),
    # ---- other -------------------------------------------------------------------------------
    # https://github.com/milesial/Pytorch-UNet/issues/452
    Case(
        "other-channels",
        "RuntimeError: Given groups=1, weight of size [64, 3, 3, 3], expected input[1, 4, 400, "
        "640] to have 3 channels, but got 4 channels instead",
        "other",
    ),
    # https://github.com/pytorch/pytorch/issues/8934 (names cuDNN, but no failure family)
    Case(
        "other-mentions-cudnn",
        "RuntimeError: AffineGridGenerator needs CuDNN for processing CUDA inputs, but CuDNN is not enabled",
        "other",
    ),
]


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_corpus(case: Case) -> None:
    assert classify(case.message, status=case.status, exc_type=case.exc_type) == case.expected


def test_corpus_covers_every_family() -> None:
    assert {c.expected for c in CORPUS} == set(FAMILIES)
    assert len(CORPUS) >= 40


def test_corpus_ids_are_unique() -> None:
    assert len({c.id for c in CORPUS}) == len(CORPUS)


# ---- log manglings: every corpus entry keeps its family ---------------------------------------


def _each_line(prefix: str) -> Callable[[str], str]:
    return lambda text: "\n".join(prefix + line for line in text.split("\n"))


def _ansi(text: str) -> str:
    # colour the first word of every line, as rich/colorlog/GitHub do
    out = []
    for line in text.split("\n"):
        head, _, rest = line.partition(" ")
        out.append(f"\x1b[1;31m{head}\x1b[0m {rest}" if rest else f"\x1b[33m{line}\x1b[0m")
    return "\n".join(out)


def _fold(width: int) -> Callable[[str], str]:
    """A terminal that hard-wraps at ``width``, cutting words and names anywhere."""

    def fold(text: str) -> str:
        lines: list[str] = []
        for line in text.split("\n"):
            lines.extend(line[i : i + width] for i in range(0, len(line), width) or [0])
            if not line:
                lines.append("")
        return "\n".join(lines)

    return fold


MANGLINGS: dict[str, Callable[[str], str]] = {
    "ansi": _ansi,
    "crlf": lambda text: text.replace("\n", "\r\n") + "\r\n",
    "torchrun-rank": _each_line("[rank0]: "),
    "torchrun-default": _each_line("[default3]:"),
    "python-logging": _each_line("2024-05-01 12:00:00,123 - ERROR - "),
    "logger-name": _each_line("2024-05-01 12:00:00,123 - convmatrix.suite - WARNING - "),
    "iso-bracket": _each_line("[2024-05-01T12:00:00Z] "),
    "glog": _each_line("E0501 12:00:00.123456  4242 conv_test.cpp:42] "),
    "pytest": _each_line("E       "),
    "stacked": _each_line("[rank1]:[2024-05-01T12:00:00.123+00:00] ERROR | "),
    "fold-48": _fold(48),
    "fold-77": _fold(77),
}


@pytest.mark.parametrize("mangle", list(MANGLINGS.values()), ids=list(MANGLINGS))
@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_mangled_corpus_keeps_its_family(case: Case, mangle: Callable[[str], str]) -> None:
    message = mangle(case.message)
    assert classify(message, status=case.status, exc_type=case.exc_type) == case.expected


@pytest.mark.parametrize("width", range(1, len("CUDNN_STATUS_NOT_SUPPORTED_SHAPE")))
def test_status_name_broken_at_any_point(width: int) -> None:
    name = "CUDNN_STATUS_NOT_SUPPORTED_SHAPE"
    message = f"RuntimeError: cuDNN error: {name[:width]}\n{name[width:]}\n"
    assert f"cuDNN error: {name}" in normalize(message)
    assert classify(message) == SIGNATURE


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # the sub-codes that stay the signature ...
        ("CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN", SIGNATURE),
        ("CUDNN_STATUS_NOT_SUPPORTED_SHAPE", SIGNATURE),
        ("CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE", SIGNATURE),
        ("CUDNN_STATUS_NOT_SUPPORTED_LAYOUT", SIGNATURE),
        ("CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT", SIGNATURE),
        ("CUDNN_STATUS_NOT_SUPPORTED_PADDING", SIGNATURE),
        ("CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM", SIGNATURE),
        ("CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API", SIGNATURE),
        ("CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE", SIGNATURE),
        ("CUDNN_STATUS_NOT_SUPPORTED_SOME_FUTURE_REASON", SIGNATURE),
        # ... and those whose truth is a sibling
        ("CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH", "cudnn_arch_mismatch"),
        ("CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER", "cuda_driver_insufficient"),
        ("CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART", "cudnn_version_mismatch"),
        ("CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING", "cudnn_library_missing"),
        ("CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE", "cudnn_library_missing"),
        # other cuDNN 9 families
        ("CUDNN_STATUS_BAD_PARAM_NULL_POINTER", "cudnn_bad_param"),
        ("CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH", "cudnn_bad_param"),
        ("CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED", "cudnn_internal_error"),
        ("CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED", "cudnn_internal_error"),
        ("CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED", "cuda_oom"),
        ("CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER", "cudnn_execution_failed"),
        ("CUDNN_STATUS_EXECUTION_FAILED_CUBLAS", "cudnn_execution_failed"),
        ("CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH", "cudnn_version_mismatch"),
        ("CUDNN_STATUS_VERSION_MISMATCH", "cudnn_version_mismatch"),
        ("CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED", "cudnn_library_missing"),
        ("CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING", "cudnn_library_missing"),
        ("CUDNN_STATUS_ALLOC_FAILED", "cuda_oom"),
        ("CUDNN_STATUS_LICENSE_ERROR", "other"),
        ("CUDNN_STATUS_SUCCESS", "other"),
    ],
)
def test_status_name_decisions(name: str, expected: str) -> None:
    assert classify(f"RuntimeError: cuDNN error: {name}") == expected


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        ("9", SIGNATURE),
        ("3000", SIGNATURE),
        ("3002", SIGNATURE),
        ("3007", "cudnn_arch_mismatch"),
        ("8", "cudnn_execution_failed"),
        ("2000", "cudnn_bad_param"),
        ("0", "other"),
    ],
)
def test_numeric_status(number: str, expected: str) -> None:
    message = f"CUDNN_BACKEND_OPERATION: cudnnFinalize Descriptor Failed cudnn_status: {number}"
    assert classify(message) == expected


# ---- precedence between markers in one message ------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # the engine search failed; NOT_SUPPORTED was each engine's reason
        (
            "cuDNN Frontend error: [cudnn_frontend] Error: No execution plans support the graph. "
            "cudnn_status: CUDNN_STATUS_NOT_SUPPORTED",
            "cudnn_no_engine",
        ),
        (
            "RuntimeError: Unable to find a valid cuDNN algorithm to run convolution (CUDNN_STATUS_NOT_SUPPORTED)",
            "cudnn_no_algorithm",
        ),
        # an OOM explains a NOT_SUPPORTED next to it
        (
            "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "cuda_oom",
        ),
        # a broken environment explains everything after it
        (
            "Unable to load any of {libcudnn_engines_precompiled.so.9}\n"
            "RuntimeError: GET was unable to find an engine to execute this computation",
            "cudnn_library_missing",
        ),
        (
            "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE",
            "cudnn_library_missing",
        ),
        # the more specific cuDNN status wins over the generic one
        (
            "cudnn_status: CUDNN_STATUS_INTERNAL_ERROR\ncudnn_status: CUDNN_STATUS_NOT_SUPPORTED",
            SIGNATURE,
        ),
        # the suite's own verdict wins over any text it quotes
        ("numeric mismatch: reference run logged CUDNN_STATUS_NOT_SUPPORTED", "numeric_mismatch"),
    ],
    ids=[
        "no_engine-over-signature",
        "no_algorithm-over-signature",
        "oom-over-signature",
        "library-over-no_engine",
        "sublibrary-unavailable-is-not-signature",
        "signature-over-internal",
        "numeric-over-quoted-text",
    ],
)
def test_precedence(message: str, expected: str) -> None:
    assert classify(message) == expected


def test_plan_warnings_do_not_outvote_the_exception() -> None:
    # https://github.com/4pygmalion/ASC3/issues/2 (the warning) and
    # https://github.com/pytorch/pytorch/issues/27588 (the error that ended the case)
    message = (
        "UserWarning: Plan failed with a CuDNNError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\n"
        "Exception raised from run_conv_plan at ../aten/src/ATen/native/cudnn/Conv_v8.cpp:374\n"
        "RuntimeError: cuDNN error: CUDNN_STATUS_MAPPING_ERROR"
    )
    assert classify(message) == "cudnn_mapping_error"


def test_cudnn_api_log_warnings_do_not_outvote_the_exception() -> None:
    # cuDNN's API log (CUDNN_LOGWARN_DBG=1) reports every engine that declines as a warning
    message = (
        "Warning: CUDNN_STATUS_NOT_SUPPORTED_SHAPE; Reason: engine 7 does not support the shape\n"
        "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"
    )
    assert classify(message) == "cudnn_execution_failed"


# ---- status and exception type ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("passed", None),
        ("skipped", None),
        ("PASSED", None),
        ("crashed", "crash"),
        ("timeout", "timeout"),
        ("failed", "cudnn_library_missing"),
        ("error", "cudnn_library_missing"),
    ],
)
def test_status_decides(status: str, expected: str | None) -> None:
    # a message that names a family still yields the status' verdict where the status has one
    message = "Could not load library libcudnn_cnn_infer.so.8. Error: libcuda.so: cannot open"
    assert classify(message, status=status) == expected


def test_passed_case_with_plan_warning_text_is_no_failure() -> None:
    assert classify(PLAN_WARNING, status="passed") is None


@pytest.mark.parametrize("message", [None, "", "   \n  "], ids=["none", "empty", "blank"])
def test_failure_without_message_is_other(message: str | None) -> None:
    assert classify(message) == "other"


@pytest.mark.parametrize(
    ("exc_type", "expected"),
    [
        ("torch.OutOfMemoryError", "cuda_oom"),
        ("torch.cuda.OutOfMemoryError", "cuda_oom"),
        ("OutOfMemoryError", "cuda_oom"),
        ("AssertionError", "other"),
        ("RuntimeError", "other"),
        (None, "other"),
    ],
)
def test_exception_type_is_the_last_hint(exc_type: str | None, expected: str) -> None:
    assert classify("something went wrong", exc_type=exc_type) == expected


def test_numeric_mismatch_line_inside_an_assertion() -> None:
    message = "assert False\n numeric mismatch: max abs error 3.0 > atol 1e-3"
    assert classify(message, exc_type="AssertionError") == "numeric_mismatch"
    assert classify(message, exc_type="RuntimeError") == "other"


# ---- warnings ---------------------------------------------------------------------------------


def test_classify_warnings_real_captures() -> None:
    warnings = [
        # https://github.com/ultralytics/ultralytics/issues/12606
        PLAN_WARNING,
        # https://github.com/ultralytics/yolov5/issues/2389
        "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found "
        "version 10010). Please update your GPU driver by downloading and installing a new "
        "version from the URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
        "https://pytorch.org to install a PyTorch version that has been compiled with your "
        "version of the CUDA driver. (Triggered internally at  /pytorch/c10/cuda/"
        "CUDAFunctions.cpp:100.)",
        # https://github.com/matheusgadelha/MRTNet/issues/10
        "UserWarning: nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.",
        # https://github.com/4pygmalion/ASC3/issues/2
        "UserWarning: Plan failed with a CuDNNError: cuDNN error: CUDNN_STATUS_BAD_PARAM\n"
        "Exception raised from run_conv_plan at ../aten/src/ATen/native/cudnn/Conv_v8.cpp:374 "
        "(most recent call first):",
        # https://github.com/2noise/ChatTTS/issues/301 (Windows path, conv1d)
        "C:\\ProgramData\\miniconda3\\envs\\tts\\Lib\\site-packages\\torch\\nn\\modules\\conv.py:"
        "306: UserWarning: Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_"
        "DESCRIPTOR: cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED "
        "(Triggered internally at ..\\aten\\src\\ATen\\native\\cudnn\\Conv_v8.cpp:919.)",
    ]
    assert classify_warnings(warnings) == [
        SIGNATURE,
        "cuda_driver_insufficient",
        "cudnn_bad_param",
    ]


def test_classify_warnings_mangled_and_subcoded() -> None:
    warnings = [
        "\x1b[33m[rank0]: UserWarning: Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION"
        "_PLAN_DESCRIPTOR: cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_\r\n"
        "[rank0]: SUPPORTED_LAYOUT\x1b[0m\r\n",
        "Warning: CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH; Reason: MHA only supports FP16/BF16 I/O",
    ]
    assert classify_warnings(warnings) == [SIGNATURE, "cudnn_arch_mismatch"]


def test_classify_warnings_empty_and_unrelated() -> None:
    assert classify_warnings([]) == []
    assert classify_warnings(iter(["DeprecationWarning: x is deprecated", ""])) == []


def test_torch_gpu_warning_does_not_hide_the_error() -> None:
    # https://github.com/pytorch/ELF/issues/99: the warning, then the error that ended the run
    message = (
        "Found GPU0 GeForce GTX 550 Ti which is of cuda capability 2.1.\n"
        "    PyTorch no longer supports this GPU because it is too old.\n"
        "RuntimeError: CuDNN error: CUDNN_STATUS_ARCH_MISMATCH"
    )
    assert classify(message) == "cudnn_arch_mismatch"
    # a new GPU generation on an old wheel that still runs through PTX JIT: the signature counts
    message = (
        "UserWarning: NVIDIA B200 with CUDA capability sm_100 is not compatible with the current "
        "PyTorch installation.\n"
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"
    )
    assert classify(message) == SIGNATURE


def test_torch_unsupported_gpu_warning_is_no_kernel_image() -> None:
    # torch's warning when the wheel has no kernels for the GPU (an sm_120 GPU on a cu124 wheel)
    warning = (
        "UserWarning: NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with "
        "the current PyTorch installation.\nThe current PyTorch install supports CUDA "
        "capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90."
    )
    assert classify_warnings([warning]) == ["cuda_no_kernel_image"]


# ---- normalize --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("\x1b[1;31mRuntimeError\x1b[0m: boom", "RuntimeError: boom"),
        ("\x1b]0;title\x07RuntimeError: boom", "RuntimeError: boom"),
        ("[31mRuntimeError[0m: boom", "RuntimeError: boom"),
        ("a\r\nb\rc", "a\nb\nc"),
        ("[rank0]: a\n[rank12]: b", "a\nb"),
        ("[default0]:a", "a"),
        ("2024-05-01 12:00:00,123 - ERROR - a", "a"),
        ("2024-05-01 12:00:00,123 - root - ERROR - a", "a"),
        ("[2024-05-01T12:00:00Z] a", "a"),
        ("2024-05-01T12:00:00.1234567Z a", "a"),
        ("E0501 12:00:00.123 123 file.cpp:42] a", "a"),
        ("W0611 21:28:26.564000 5848 torch\\_dynamo\\convert_frame.py:824] a", "a"),
        ("[W1220 15:51:29.563710739 ProcessGroupNCCL.cpp:1250] a", "a"),
        ("[W reducer.cpp:1360] a", "a"),
        ("ERROR:root:a", "a"),
        ("[ERROR] a", "a"),
        ("E       RuntimeError: a", "RuntimeError: a"),
        ("##[error]a", "a"),
        ("[rank0]:[2024-05-01T12:00:00Z] ERROR | a", "a"),
        ("CUDNN_STATUS_NOT_\nSUPPORTED", "CUDNN_STATUS_NOT_SUPPORTED"),
        ("CUDNN_STATUS_NOT_SUPPORTED\n_SHAPE", "CUDNN_STATUS_NOT_SUPPORTED_SHAPE"),
        (
            "cudnn_status: CUDNN_STATUS_NOT_SUPP\nORTED (x)",
            "cudnn_status: CUDNN_STATUS_NOT_SUPPORTED (x)",
        ),
        # kept: real line ends, and uppercase words that make no status name when joined
        ("RuntimeError: a\nTraceback", "RuntimeError: a\nTraceback"),
        ("STATUS: RUNNING\nPASSED", "STATUS: RUNNING\nPASSED"),
        ("Error: something\nWarning: else", "Error: something\nWarning: else"),
    ],
)
def test_normalize(raw: str, clean: str) -> None:
    assert normalize(raw) == clean


def test_normalize_unwraps_fixed_width() -> None:
    text = (
        "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you "
        "passed in a non-contiguous input. GET was unable to find an engine to execute it"
    )
    assert normalize(_fold(41)(text)) == text


def test_normalize_keeps_tables_and_short_logs() -> None:
    # https://github.com/TemryL/ComfyUI-IDM-VTON/issues/9 (nvidia-smi: equal-width rows)
    table = (
        "+-----------------------------------------------------------------------------+\n"
        "| NVIDIA-SMI 525.116.04   Driver Version: 525.116.04   CUDA Version: 12.0     |\n"
        "|-------------------------------+----------------------+----------------------+\n"
        "|   0  NVIDIA A40          On   | 00000000:E3:00.0 Off |                    0 |\n"
        "+-------------------------------+----------------------+----------------------+"
    )
    assert normalize(table) == table
    short = "epoch 1 loss 0.5\nepoch 2 loss 0.4\nepoch 3 loss 0.3"
    assert normalize(short) == short


# ---- contract of the vocabulary ---------------------------------------------------------------


def test_vocabulary() -> None:
    assert len(FAMILIES) == len(set(FAMILIES)) == 21  # issue 47 added cuda_library_swapped
    assert SIGNATURE == "cudnn_not_supported"
    assert SIGNATURE in FAMILIES
    expected_infrastructure = {
        "cudnn_version_mismatch",
        "cudnn_library_missing",
        "cuda_library_swapped",
        "cuda_driver_insufficient",
        "cuda_no_device",
        "cudnn_not_initialized",
    }
    assert expected_infrastructure == INFRASTRUCTURE
    assert set(FAMILIES) > INFRASTRUCTURE
    # every family a text can name has a place in the precedence; the status-only ones do not
    assert len(PRECEDENCE) == len(set(PRECEDENCE))
    assert set(PRECEDENCE) == set(FAMILIES) - {"crash", "timeout", "other"}


def test_infrastructure_families_outrank_the_signature() -> None:
    for family in INFRASTRUCTURE:
        assert PRECEDENCE.index(family) < PRECEDENCE.index(SIGNATURE)


# ---- speed: triage runs this over multi-GB logs -----------------------------------------------


def test_speed_on_a_large_log() -> None:
    noise = "2024-05-01 12:00:00,123 - INFO - step 1200 loss 0.4132 lr 3.0e-4 throughput 812/s\n"
    log = noise * 40_000 + "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED\n"  # ~3.4 MB
    started = time.perf_counter()
    assert classify(log) == SIGNATURE
    elapsed = time.perf_counter() - started
    # about 0.1 s on a laptop; the bound only catches a pathological (quadratic) regression
    assert elapsed < 5.0, f"classify took {elapsed:.2f}s on {len(log) / 1e6:.1f} MB"
