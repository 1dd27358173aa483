"""Direct capture of cuDNN's API log on a GPU machine (tests/gpu/README.md): a few convs, each in
its own process at the warning (2) and info (3) levels, each log to its own file, so that the
format cuDNN really writes lands as test data. Usage: python capture_cudnn_logs.py OUT_DIR"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SNIPPETS = {
    # a plain fp16 channels_last conv: the lines of a successful call
    "ok_fp16_nhwc": "x=torch.randn(2,64,32,32,device='cuda',dtype=torch.half).to(memory_format=torch.channels_last);"
                    "w=torch.randn(64,64,3,3,device='cuda',dtype=torch.half).to(memory_format=torch.channels_last);"
                    "y=torch.nn.functional.conv2d(x,w,padding=1)",
    # benchmark on: cuDNN's FIND path
    "find_bf16_conv3d": "torch.backends.cudnn.benchmark=True;"
                        "x=torch.randn(1,16,8,32,32,device='cuda',dtype=torch.bfloat16);"
                        "w=torch.randn(16,16,3,3,3,device='cuda',dtype=torch.bfloat16);"
                        "y=torch.nn.functional.conv3d(x,w,padding=1)",
    # one sample past 2^31 elements: cuDNN's int32 indexing limit
    "big_single_sample": "x=torch.randn(1,1,46341,46343,device='cuda',dtype=torch.half);"
                         "w=torch.randn(1,1,3,3,device='cuda',dtype=torch.half);"
                         "y=torch.nn.functional.conv2d(x,w)",
    # deterministic dilated transposed 3d in fp16, forward and backward
    "det_dilated_tconv3d": "torch.backends.cudnn.deterministic=True;"
                           "x=torch.randn(1,8,5,9,9,device='cuda',dtype=torch.half,requires_grad=True);"
                           "w=torch.randn(8,8,3,3,3,device='cuda',dtype=torch.half,requires_grad=True);"
                           "y=torch.nn.functional.conv_transpose3d(x,w,dilation=2,stride=2);y.sum().backward()",
}
KEEP = 1 << 18  # bytes kept of each end of an info log over twice that (they reach megabytes)


def main(out: Path) -> None:
    summary: dict[str, dict[str, object]] = {}
    for name, code in SNIPPETS.items():
        for level in ("2", "3"):
            log = out / f"cudnn-{name}-L{level}.log"
            env = dict(os.environ, CUDNN_LOGLEVEL_DBG=level, CUDNN_LOGDEST_DBG=str(log), CUDNN_LOGERR_DBG="1",
                       CUDNN_LOGWARN_DBG="1", TORCH_CUDNN_V8_API_DEBUG="1")
            if level == "3":
                env["CUDNN_LOGINFO_DBG"] = "1"
            started = time.monotonic()
            try:
                done = subprocess.run([sys.executable, "-c", f"import torch;{code};torch.cuda.synchronize();"
                                       "print(tuple(y.shape))"], env=env, capture_output=True, text=True, timeout=90)
                rc: object = done.returncode
                tail = (done.stdout + done.stderr)[-3000:]
            except subprocess.TimeoutExpired:
                rc, tail = "timeout", ""
            size = log.stat().st_size if log.exists() else None
            summary[f"{name}-L{level}"] = {"rc": rc, "tail": tail, "seconds": round(time.monotonic() - started, 2),
                                           "log_bytes": size}
            print(name, level, rc, size, flush=True)
            if size is not None and size > 2 * KEEP:
                data = log.read_bytes()
                log.write_bytes(data[:KEEP] + b"\n[...cut by the capture script...]\n" + data[-KEEP:])
    (out / "capture.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
