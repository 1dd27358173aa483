"""convmatrix: which PyTorch x CUDA x cuDNN stacks hit CUDNN_STATUS_NOT_SUPPORTED, against a control."""

__version__ = "0.1.0"
