"""`convmatrix repro --minimal`: the case as a script short enough to paste into an upstream issue.

Built from the same description of the case as the full script (repro.Spec, read and checked by
repro.spec_of): the versions printed, the tensors built as the cell built them (seeded from
zlib.crc32(case id) in the suite's order, the shapes it ran, the layout or the case's own view,
--pad-channels' zero channels, the memory format), the cuDNN settings, the op (under autocast,
torch.compile or a CUDA graph when the case has one) and its direction's gradients. Only the lines
the case needs are written, so a plain case is at most 30 lines.

It exits 1 when the signature appears, 0 when it does not, and 3 when something else stops it (no
CUDA here, another error). The signature is a known token of the failure (a CUDNN_STATUS_* name,
"illegal memory access", ...) or the first words of its message reduced to letters, digits and a
few punctuation marks, so it is safe inside double quotes; free text goes into comments only (as in
the full script). A numeric mismatch is checked on the forward output against float64 with a
relative tolerance by dtype, cruder than the suite's derived bound: the full script has that bound
and every gradient.
"""

from __future__ import annotations

import math
import re
import zlib
from pathlib import Path

from convmatrix.prove import repro
from convmatrix.prove.repro import Provenance, Spec, comment_text, install_lines

TORCH_DTYPES = {"float32": "torch.float32", "float16": "torch.float16", "bfloat16": "torch.bfloat16",
                "float64": "torch.float64"}
FORMATS = {"channels_last": "torch.channels_last", "channels_last_3d": "torch.channels_last_3d"}
TILE_LIMIT = 1 << 24  # as the suite: a bigger tensor repeats one seeded block
TILE_BLOCK = 1000003
# Relative to max |reference|: float32 allows TF32 (torch's cuDNN default) unless the case turns it off.
# float64: no TF32 and 2^-53 rounding, so float32's TF32-free 1e-4 covers it with room to spare.
TOLERANCE = {"float32": 1e-2, "float16": 2e-2, "bfloat16": 5e-2, "float64": 1e-4}
# Known tokens of a failure, most telling first (a status name before "cuDNN error").
KNOWN = tuple(re.compile(p) for p in (
    r"(?:CUDNN|CUBLAS|CUFFT|CUSOLVER|CUSPARSE)_STATUS_[A-Z_]+", r"illegal memory access", r"out of memory",
    r"misaligned address", r"unspecified launch failure", r"device-side assert", r"not implemented for '[A-Za-z]+'",
    r"Unable to find a valid cuDNN algorithm", r"cuDNN error", r"CUDA error"))
SAFE = re.compile(r"[A-Za-z0-9 _:.,()=+-]+")
NUMERIC = "numeric mismatch"


def signature(message: str, exc_type: str) -> str:
    """What the script looks for in the error it catches: a known token, else the message's first
    safe words, else the exception's type; never a quote or a backslash."""
    first = (message.strip().splitlines() or [""])[0]
    for pattern in KNOWN:
        found = pattern.search(first) or pattern.search(message)
        if found:
            return found[0]
    words = SAFE.match(first)
    if words and len(words[0].strip()) >= 8:
        return words[0].strip()[:80]
    return exc_type if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,60}", exc_type) else "Error"


def _memory_format(spec: Spec, rank: int) -> str | None:
    if spec.memory_format is not None:
        return FORMATS[spec.memory_format]
    if spec.channels_last_knob and rank in (4, 5):
        return FORMATS["channels_last" if rank == 4 else "channels_last_3d"]
    return None


def _draw(name: str, shape: tuple[int, ...], dtype: str) -> str:
    if math.prod(shape) > TILE_LIMIT:  # the suite's tiling: one seeded block, repeated
        count = math.prod(shape)
        return (f"{name} = torch.randn({TILE_BLOCK}, generator=g).to({dtype}).to(dev)"
                f".repeat({-(-count // TILE_BLOCK)})[:{count}].view({shape!r})")
    return f"{name} = torch.randn({shape!r}, generator=g).to({dtype}).to(dev)"


def _view(spec: Spec, rank: int) -> str | None:
    """The line that puts x (a copy of the leaf xi) in the case's layout or own view."""
    if spec.layout == "permuted":
        return "x = xi.transpose(-1, -2).contiguous().transpose(-1, -2)  # permuted layout"
    if spec.layout == "sliced":
        return "x = torch.zeros(*xi.shape[:-1], 2 * xi.shape[-1], dtype=xi.dtype, device=dev)[..., ::2].copy_(xi)"
    if spec.layout == "transposed":
        return "x = xi.transpose(0, 1).contiguous().transpose(0, 1)  # N and C swapped in memory"
    if spec.layout == "nhwc_strided":
        return "x = xi.movedim(1, -1).contiguous().movedim(-1, 1)  # channels last in memory (a permuted NHWC)"
    if spec.input_strides is not None:
        shape = spec.input_shape if spec.pad is None else (spec.input_shape[0], spec.pad[0] * spec.pad[3],
                                                           *spec.input_shape[2:])
        extent = spec.storage_offset + sum((n - 1) * s for n, s in zip(shape, spec.input_strides, strict=True)) + 1
        return (f"x = torch.zeros({extent}, dtype=xi.dtype, device=dev)"
                f".as_strided({shape!r}, {spec.input_strides!r}, {spec.storage_offset!r}).copy_(xi)  # the case's view")
    return None


def script(spec: Spec, where: Provenance, message: str, exc_type: str) -> str:
    """The minimal script for spec (repro.spec_of's description of the case)."""
    for value in (spec.input_shape, spec.weight_shape, spec.output_shape, spec.stride, spec.padding, spec.dilation,
                  spec.output_padding, spec.input_strides, spec.pad):
        repro._check_literal(value)  # ints only go into the code
    repro._check_literal(spec.case_id)
    rank = len(spec.input_shape)
    dtype = TORCH_DTYPES[spec.dtype]
    compute = TORCH_DTYPES[spec.autocast or spec.dtype]
    numeric = message.strip().startswith(NUMERIC) or (exc_type == "AssertionError" and NUMERIC in message)
    sig = NUMERIC if numeric else signature(message, exc_type)
    backward = spec.direction != "forward"
    x_grad = backward and spec.direction != "backward_weight"
    w_grad = backward and spec.direction != "backward_input"
    env = where.env
    lines = [
        f"# convmatrix repro --minimal: {spec.case_id}",
        f"# cell {comment_text(where.cell, 120)} of run {comment_text(where.run, 120)}",
        f"# {comment_text(where.status, 40)}: {comment_text(where.message, 200)}",
        f"# stack seen: torch {comment_text(env.get('torch'), 40)}, CUDA {comment_text(env.get('cuda'), 20)}, "
        f"cuDNN {comment_text(env.get('cudnn'), 20)}; install: " + "; ".join(install_lines(env, where.requested)),
        f"# python THIS_FILE [cuda|cpu] (default {spec.device}): exit 1 when the signature appears, 0 when not, "
        "3 otherwise",
        "import sys",
        "import torch",
        "import torch.nn.functional as F",
        f'dev = sys.argv[1] if len(sys.argv) > 1 else "{spec.device}"',
        'print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(), '
        '"device", dev)',
        'if dev == "cuda" and not torch.cuda.is_available():',
        '    sys.exit(print("CANNOT JUDGE: no CUDA here (pass cpu)") or 3)',
    ]
    if spec.benchmark:
        lines.append("torch.backends.cudnn.benchmark = True")
    if spec.deterministic:
        lines.append("torch.backends.cudnn.deterministic = True")
    if spec.allow_tf32 is not None:
        lines.append(f"torch.backends.cudnn.allow_tf32 = {spec.allow_tf32!r}")
    if not spec.cudnn_enabled:
        lines.append("torch.backends.cudnn.enabled = False  # as the cell ran it")
    if spec.pad is not None:
        lines += [
            f"def pad(t, d, g, per, ng, nper):  # the cell's --pad-channels {spec.pad_to}: (g, per) -> (ng, nper)",
            "    s = t.shape",
            "    t = t.reshape(*s[:d], g, per, *s[d + 1:])",
            "    t = F.pad(t, [0, 0] * (t.dim() - d - 2) + [0, nper - per, 0, ng - g])",
            "    return t.reshape(*s[:d], ng * nper, *s[d + 1:])",
        ]
    lines.append(f"g = torch.Generator().manual_seed({_crc(spec.case_id)})  # zlib.crc32(case id), as the suite seeds")
    lines.append(_draw("xi", spec.input_shape, dtype) + (".requires_grad_()" if x_grad else ""))
    lines.append(_draw("w", spec.weight_shape, dtype) + (".requires_grad_()" if w_grad else ""))
    if spec.bias:
        lines.append(_draw("b", spec.bias_shape, dtype))
    elif backward:
        lines.append(f"torch.randn({spec.bias_shape!r}, generator=g)  # drawn, unused (no bias), as the suite draws")
    if backward:
        lines.append(_draw("gy", spec.output_shape, compute))
    if spec.direction == "double_backward":
        lines.append(_draw("v", spec.input_shape, compute))
    x, w, b, groups = "xi", "w", "b" if spec.bias else "None", spec.groups
    if spec.pad is not None:
        new_groups, in_g, out_g, new_in, new_out = spec.pad
        if spec.transposed:  # the weight is (in, out per group, ...)
            w_line = f"pad(pad(w, 0, {spec.groups}, {in_g}, {new_groups}, {new_in}), 1, 1, {out_g}, 1, {new_out})"
        else:
            w_line = f"pad(pad(w, 0, {spec.groups}, {out_g}, {new_groups}, {new_out}), 1, 1, {in_g}, 1, {new_in})"
        lines.append(f"x, wp = pad(xi, 1, {spec.groups}, {in_g}, {new_groups}, {new_in}), {w_line}")
        x, w, groups = "x", "wp", new_groups
        if spec.bias:
            lines.append(f"b = pad(b, 0, {spec.groups}, {out_g}, {new_groups}, {new_out})")
        if backward:
            lines.append(f"gy = pad(gy, 1, {spec.groups}, {out_g}, {new_groups}, {new_out})")
    view = _view(spec, rank)
    if view is not None:
        lines.append(view if x == "xi" else view.replace("xi", x))
        x = "x"
    fmt = _memory_format(spec, rank)
    if fmt is not None:
        lines.append(f"x = {x}.contiguous(memory_format={fmt})")
        x = "x"
    w_fmt = FORMATS[spec.weight_memory_format] if spec.weight_memory_format else fmt
    if w_fmt is not None:
        lines.append(f"wm = {w}.contiguous(memory_format={w_fmt})")
        w = "wm"
    extra = f", output_padding={spec.output_padding!r}" if spec.transposed else ""
    keywords = f"stride={spec.stride!r}, padding={spec.padding!r}, dilation={spec.dilation!r}, groups={groups}{extra}"
    call = f"F.{spec.op}({x}, {w}, {b}, {keywords})"
    if spec.via == "compile":
        lines.append(f"conv = torch.compile(lambda x, w, b: F.{spec.op}(x, w, b, {keywords}), "
                     "fullgraph=True, dynamic=False)")
        call = f"conv({x}, {w}, {b})"
    lines.append(f'SIGNATURE = "{sig}"')
    lines.append("try:")
    body = [f"out = {call}"]
    if spec.via == "cuda_graph":
        body = [
            'if dev == "cuda":  # the cell captured the conv in a CUDA graph and replayed it',
            "    s = torch.cuda.Stream()",
            "    s.wait_stream(torch.cuda.current_stream())",
            "    with torch.cuda.stream(s):",
            f"        {call}",
            "    torch.cuda.current_stream().wait_stream(s)",
            "    graph = torch.cuda.CUDAGraph()",
            "    with torch.cuda.graph(graph):",
            f"        out = {call}",
            "    graph.replay()",
            "else:",
            f"    out = {call}",
        ]
    if spec.autocast is not None:
        body = [f"with torch.autocast(dev, dtype={compute}):", *("    " + line for line in body)]
    lines += ["    " + line for line in body]
    leaf_list = ", ".join(name for name, on in (("xi", x_grad), ("w", w_grad)) if on)
    if spec.direction == "double_backward":
        lines.append("    gx, _ = torch.autograd.grad(out, (xi, w), gy, create_graph=True)  # a gradient penalty")
        lines.append("    torch.autograd.grad(gx, (w,), v)")
    elif backward:
        lines.append(f"    torch.autograd.grad(out, ({leaf_list},), gy)")
    lines += [
        '    if dev == "cuda":',
        "        torch.cuda.synchronize()",
        "except Exception as exc:",
        '    text = "%s: %s" % (type(exc).__name__, exc)',
        '    print(("REPRODUCES: " if SIGNATURE in text else "ANOTHER ERROR: ") + text.strip().splitlines()[0])',
        "    sys.exit(1 if SIGNATURE in text else 3)",
    ]
    if numeric:
        bias = "b.double().cpu()" if spec.bias else "None"
        tol = 1e-4 if spec.dtype == "float32" and spec.allow_tf32 is False else TOLERANCE[spec.autocast or spec.dtype]
        lines += [
            "with torch.backends.cudnn.flags(enabled=False):  # the forward output against float64 on the CPU",
            f"    ref = F.{spec.op}({x}.detach().double().cpu(), {w}.detach().double().cpu(), {bias}, {keywords})",
            f"err, tol = (out.detach().double().cpu() - ref).abs().max().item(), {tol!r} * ref.abs().max().item()",
            'print(("REPRODUCES: numeric mismatch" if err > tol else "PASSES") + ": max |out - ref| %g, tol %g" '
            "% (err, tol))",
            "sys.exit(1 if err > tol else 0)",
        ]
    else:
        lines += ['print("PASSES: no", SIGNATURE)', "sys.exit(0)"]
    return "\n".join(lines) + "\n"


def _crc(case_id: str) -> int:
    return zlib.crc32(case_id.encode("utf-8"))


def minimal(run: Path, cell: str, case_id: str, device: str | None = None) -> str:
    """The minimal script for one case of one cell (repro.repro's reading, the shorter script)."""
    result = repro.find_cell(run, cell)
    line = repro.case_line(result, case_id)
    message = str(line["message"]) if isinstance(line.get("message"), str) else ""
    exc_type = str(line["exc_type"]) if isinstance(line.get("exc_type"), str) else ""
    return script(repro.spec_of(line, result.observed, device), repro.provenance(result, line), message, exc_type)
