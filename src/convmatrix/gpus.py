"""The runner's GPUs: discovery through nvidia-smi, and the key that names a result directory.

A device is a whole GPU or, on a GPU in MIG mode, one of its MIG devices (a slice): CUDA runs on
a slice as on a GPU of its own, and a result from a slice is not a result from the whole GPU,
so a slice has a key of its own (docs/contracts.md, "GPU keys").

What nvidia-smi prints, from NVIDIA's documentation and real output quoted in NVIDIA's issues:
- `nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits`: one line per physical GPU.
  `mig.mode.current` and `mig.mode.pending` are `Enabled` or `Disabled` (`[N/A]` on a GPU
  without MIG); NVML's nvmlDeviceGetMigMode: "The pending MIG mode refers to the target mode
  following the next activation trigger" (a GPU reset or reboot).
- `nvidia-smi -L`: `GPU 0: NVIDIA A100 80GB PCIe (UUID: GPU-932bfb2c-…)`, then for a GPU in MIG
  mode one indented line per MIG device,
  `  MIG 3g.40gb     Device  0: (UUID: MIG-0929581a-2be6-5dec-bf34-0954c6c529a6)`
  (github.com/NVIDIA/nvidia-container-toolkit/issues/203, driver 530; the same form in
  DataDog/datadog-agent#33120, driver 535). The profile is NVIDIA's MIG device name, `<n>g.<m>gb`,
  or `<c>c.<n>g.<m>gb` for a compute instance that takes part of its GPU instance (MIG User
  Guide, "MIG Device Names"). Drivers before R470 printed `MIG-GPU-<uuid>/<gi>/<ci>` UUIDs; both
  forms are taken, and CUDA_VISIBLE_DEVICES accepts either (CUDA C++ Programming Guide, "CUDA
  Environment Variables").

A GPU whose MIG mode is pending is taken in its current mode: the pending one applies only
after a reset (NVML, above; the NVIDIA container toolkit decides the same way,
gitlab.com/nvidia/container-toolkit/libnvidia-container merge request 156, "Ignore pending MIG
mode when checking whether MIG is enabled"). Its key stays what the current mode gives, and the
run says that the mode is pending (Gpu.note). A GPU in MIG mode without any MIG device runs
nothing: CUDA cannot use a GPU in MIG mode but through its MIG devices.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, replace

from convmatrix.matrix import stacks, values

CPU_KEY = "cpu"
# The model's part of a key, at most: the longest key (a device key of a slice, --every-gpu) then
# stays within values.MAX_GPU_KEY ("-sm120", "-mig1c-4g-141gb-plus-me-all", "-gpu15-mig7": 44).
MAX_MODEL = values.MAX_GPU_KEY - 44
# The query fields discovery needs, in this order (one CSV line per physical GPU).
FIELDS = "index,uuid,name,compute_cap,memory.total,mig.mode.current,mig.mode.pending"
# A MIG profile as nvidia-smi -L prints it: a GPU instance (3g.71gb), with the share of it its
# compute instance takes when not all (1c.3g.71gb), and a media-extension suffix (1g.18gb+me).
MIG_INSTANCE = r"(?:[0-9]{1,2}c\.)?[0-9]{1,2}g\.[0-9]{1,4}gb"
MIG_PROFILE = re.compile(rf"{MIG_INSTANCE}(?:[+-][a-z]{{1,8}}(?:\.[a-z]{{1,8}})?)?", re.ASCII)
_GPU_LINE = re.compile(r"GPU ([0-9]+): .*\(UUID: (GPU-[0-9A-Za-z-]+)\)\s*")
_MIG_LINE = re.compile(r"\s+MIG (\S+)\s+Device\s+([0-9]+): \(UUID: (MIG-[0-9A-Za-z/-]+)\)\s*")
_CAPABILITY = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")


@dataclass(frozen=True, kw_only=True)
class Mig:
    """What makes a device a MIG slice: its profile, its place under its GPU, that GPU."""

    profile: str  # "3g.71gb", as nvidia-smi -L prints it
    device: int  # nvidia-smi -L's "Device N" under its GPU (the container toolkit's <GPU>:<N>)
    parent_uuid: str  # the GPU it is a slice of


@dataclass(frozen=True, kw_only=True)
class Gpu:
    index: int  # nvidia-smi's index of the GPU (for a slice: of its parent GPU)
    name: str
    capability: str  # "9.0"
    memory_mb: int = 0  # the whole GPU's memory (a slice's is in its profile)
    uuid: str = ""  # GPU-… or, for a slice, MIG-…; "" where nvidia-smi gave none
    mig: Mig | None = None  # a MIG slice; None: the whole GPU
    note: str = ""  # what the run should say of this device as it starts (a MIG mode pending a reset)

    @property
    def key(self) -> str:
        """The key its results are filed under: identical devices share it (one pool)."""
        return gpu_key(self.name, self.capability, self.mig.profile if self.mig else None)

    @property
    def device_key(self) -> str:
        """The key of this one device (--every-gpu): h200-sm90-gpu1, h200-sm90-mig3g-71gb-gpu0-mig1."""
        return f"{self.key}-{self.slot_name}"

    @property
    def slot_name(self) -> str:
        """How the progress lines name the device: gpu1, or gpu0-mig1 for MIG device 1 of GPU 0."""
        return f"gpu{self.index}" + (f"-mig{self.mig.device}" if self.mig else "")

    @property
    def selector(self) -> str:
        """How --gpus names it: 1, or 0:1 for MIG device 1 of GPU 0 (the container toolkit's form)."""
        return f"{self.index}:{self.mig.device}" if self.mig else str(self.index)

    @property
    def pin(self) -> str:
        """CUDA_VISIBLE_DEVICES for a run on this device alone: its UUID (CUDA takes GPU-… and
        MIG-… UUIDs, CUDA C++ Programming Guide, "CUDA Environment Variables"), which names it
        whatever order CUDA counts in and whichever GPUs are in MIG mode; nvidia-smi's index
        only where nvidia-smi gave no UUID (runner.suite_env then orders CUDA by PCI bus too)."""
        return self.uuid or str(self.index)

    @property
    def generation(self) -> str:
        return stacks.load().generation(self.capability)

    def record(self) -> dict[str, object]:
        """What cell.json records of it (docs/contracts.md): index, name and capability, and
        (additive) its UUID, its MIG profile and device, and its parent GPU's UUID."""
        return {"index": self.index, "name": self.name, "capability": self.capability, "uuid": self.uuid or None,
                "mig_profile": self.mig.profile if self.mig else None,
                "mig_device": self.mig.device if self.mig else None,
                "parent_uuid": self.mig.parent_uuid if self.mig else None}


def slug(text: str) -> str:
    """Lower-case words joined by '-': what a key is made of. '+' (a MIG profile's media
    extensions, 1g.18gb+me) is spelt out, so that 1g.24gb+me and 1g.24gb-me stay two keys."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower().replace("+", "-plus-")).strip("-")


def gpu_key(name: str, capability: str, mig_profile: str | None = None) -> str:
    """'NVIDIA H200', '9.0' -> 'h200-sm90'; with MIG profile '3g.71gb' -> 'h200-sm90-mig3g-71gb':
    short, readable, safe in a directory name (values.GPU_KEY is its grammar)."""
    model = slug(re.sub(r"(?i)\bnvidia\b", "", name))[:MAX_MODEL].strip("-") or "gpu"
    key = f"{model}-sm{capability.replace('.', '')}"
    return f"{key}-mig{slug(mig_profile)}" if mig_profile else key


_KEY_PARTS = re.compile(r"(.+?)-sm([0-9]+)([0-9])((?:-mig[a-z0-9-]+?)?)(?:-gpu[0-9]+(?:-mig[0-9]+)?)?", re.ASCII)


def key_parts(key: str) -> tuple[str, str, str] | None:
    """What a GPU key says of its device when nothing ran on it: the model, its compute
    capability (the last digit is the minor: sm90 -> 9.0, sm120 -> 12.0) and its MIG profile as
    the key spells it ("3g-71gb", "" for a whole GPU); None for a key of another shape."""
    found = _KEY_PARTS.fullmatch(key)
    return (found[1], f"{found[2]}.{found[3]}", found[4].removeprefix("-mig")) if found else None


def discover() -> list[Gpu]:
    """Every device nvidia-smi lists that a cell can run on: each whole GPU, and each MIG device
    of a GPU in MIG mode; none when there is no driver (a CPU runner)."""
    out = _smi(f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits")
    if out is None:
        return []
    # nvidia-smi -L only where some GPU is in MIG mode: it alone names the MIG devices.
    listing = _smi("-L") if any(mig_on for _, mig_on in parse_query(out)) else ""
    return parse_smi(out, listing or "")


def driver() -> str:
    """The NVIDIA driver's version ("none" without one): a result depends on it."""
    out = _smi("--query-gpu=driver_version", "--format=csv,noheader")
    return ((out or "").split() or ["none"])[0]


def _smi(*args: str) -> str | None:
    """nvidia-smi's output for these arguments; None without nvidia-smi or when it fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        return subprocess.run([smi, *args], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def parse_smi(query: str, listing: str = "") -> list[Gpu]:
    """The devices in nvidia-smi's --query-gpu=FIELDS output and its -L listing."""
    return devices(parse_query(query), parse_list(listing))


def parse_query(text: str) -> list[tuple[Gpu, bool]]:
    """The --query-gpu=FIELDS lines: each physical GPU, and whether its MIG mode is on now.
    Lines of the older four fields (index, name, compute_cap, memory.total) read as GPUs
    without MIG. A line whose index or capability is not a number is no GPU."""
    found = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 4:
            fields = [fields[0], "", *fields[1:], "[N/A]", "[N/A]"]
        if len(fields) != 7 or not re.fullmatch("[0-9]+", fields[0]) or not _CAPABILITY.fullmatch(fields[3]):
            continue
        index, uuid, name, capability, memory, current, pending = fields
        note = ""
        if current != pending and pending in ("Enabled", "Disabled"):
            note = (f"GPU {index} ({name}): MIG mode is {current.lower()}, {pending.lower()} after its next reset; "
                    f"taken as it is now")
        gpu = Gpu(index=int(index), name=name, capability=capability, uuid=uuid if uuid.startswith("GPU-") else "",
                  memory_mb=int(memory) if re.fullmatch("[0-9]+", memory) else 0, note=note)
        found.append((gpu, current == "Enabled"))
    return found


def parse_list(text: str) -> dict[str, list[tuple[Mig, str]]]:
    """nvidia-smi -L: each GPU's UUID -> its MIG devices, as (Mig, the device's own UUID)."""
    slices: dict[str, list[tuple[Mig, str]]] = {}
    parent = ""
    for line in text.splitlines():
        gpu = _GPU_LINE.fullmatch(line)
        if gpu:
            parent = gpu[2]
            slices.setdefault(parent, [])
            continue
        mig = _MIG_LINE.fullmatch(line)
        if mig and parent and MIG_PROFILE.fullmatch(mig[1].lower()):
            slices[parent].append((Mig(profile=mig[1].lower(), device=int(mig[2]), parent_uuid=parent), mig[3]))
    return slices


def devices(found: list[tuple[Gpu, bool]], slices: dict[str, list[tuple[Mig, str]]]) -> list[Gpu]:
    """What runs: a GPU not in MIG mode whole; a GPU in MIG mode as its MIG devices (none when it
    has none, or nvidia-smi -L could not name them)."""
    out = []
    for gpu, mig_on in found:
        if not mig_on:
            out.append(gpu)
            continue
        out += [replace(gpu, uuid=uuid, mig=mig) for mig, uuid in slices.get(gpu.uuid, [])]
    return out


def one_per_generation(gpus: list[Gpu]) -> list[Gpu]:
    """The first GPU of each key: identical GPUs are one generation and give one result."""
    first: dict[str, Gpu] = {}
    for gpu in gpus:
        first.setdefault(gpu.key, gpu)
    return list(first.values())


SELECTOR = re.compile(r"[0-9]+(?::[0-9]+)?(?:,[0-9]+(?::[0-9]+)?)*", re.ASCII)


def select(gpus: list[Gpu], wanted: str | None) -> list[Gpu]:
    """--gpus 0,1: the GPUs of those indices (a GPU in MIG mode: all its MIG devices); 0:1: MIG
    device 1 of GPU 0; none given: all of them."""
    if not wanted:
        return gpus
    chosen = {w.strip() for w in wanted.split(",")}
    return [g for g in gpus if g.selector in chosen or str(g.index) in chosen]
