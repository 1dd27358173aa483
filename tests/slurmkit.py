"""A real single-node Slurm cluster for the tests (Debian's slurm-wlm and munge): munged as the
`munge` user, then slurmctld and slurmd in the foreground with a private slurm.conf whose
cluster name, ports, state and spool directories are this cluster's own, so two test runs on one
machine do not clash. gres.conf declares two GPUs backed by plain files, so `--gres gpu:1`
schedules on a machine without one. Importable as `slurmkit`."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MUNGE_DIRS = ("/run/munge", "/var/log/munge", "/var/lib/munge", "/etc/munge")
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol")
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE"}


def missing() -> str | None:
    """Why no cluster can be started here, or None."""
    paths = [*os.environ.get("PATH", "").split(os.pathsep), "/usr/sbin", "/sbin"]
    absent = [tool for tool in TOOLS if not shutil.which(tool, path=os.pathsep.join(paths))]
    if absent:
        return f"no {', '.join(absent)} (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "starting munged and slurmd needs root"
    return None


def sbin(tool: str) -> str:
    found = shutil.which(tool, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    assert found, tool
    return found


def munge_works() -> bool:
    try:
        encoded = subprocess.run(["munge", "-n"], capture_output=True, timeout=10, check=False)
        return encoded.returncode == 0 and subprocess.run(
            ["unmunge"], input=encoded.stdout, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_munge() -> None:
    """munged as the `munge` user with its directories owned by it; one that answers is reused
    (munged is one per machine: its socket is /run/munge/munge.socket.2)."""
    if munge_works():
        return
    for directory in MUNGE_DIRS:
        Path(directory).mkdir(parents=True, exist_ok=True)
        shutil.chown(directory, "munge", "munge")
    if not Path("/etc/munge/munge.key").exists():
        subprocess.run(["runuser", "-u", "munge", "--", sbin("mungekey"), "--create"], check=True, timeout=60)
    subprocess.run(["runuser", "-u", "munge", "--", sbin("munged")], check=True, timeout=60)
    deadline = time.monotonic() + 20
    while not munge_works():
        if time.monotonic() > deadline:
            raise RuntimeError("munged started but munge -n | unmunge does not work")
        time.sleep(0.2)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True, kw_only=True)
class Cluster:
    root: Path
    name: str

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self) -> dict[str, str]:
        """The environment for sbatch, scontrol and anything that submits to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def job(self, job_id: str) -> list[dict[str, str]]:
        """scontrol's records of a job (one per array task), as key=value fields."""
        done = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True,
                              env=self.env(), timeout=30, check=True)
        return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in done.stdout.splitlines() if line.strip()]

    def wait(self, job_id: str, timeout: float) -> list[dict[str, str]]:
        deadline = time.monotonic() + timeout
        while True:
            records = self.job(job_id)
            if records and all(r.get("JobState") in FINISHED for r in records):
                return records
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} not finished after {timeout} s: {records}")
            time.sleep(1)


def config(root: Path, name: str, node: str, ports: list[int]) -> str:
    return "\n".join([
        f"ClusterName={name}",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        f"StateSaveLocation={root / 'state'}",  # per cluster name: runs never share state
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        # No cgroups in a container: plain process tracking, no task binding, no accounting.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",  # one core per task: the shards run side by side
        "ReturnToService=2",
        "MinJobAge=600",  # finished jobs stay visible to scontrol while the test reads them
        "GresTypes=gpu",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} Gres=gpu:2 State=UNKNOWN",
        f"PartitionName=convmatrix Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


@contextmanager
def cluster(root: Path) -> Iterator[Cluster]:
    """Start a one-node cluster under root; stopped (both daemons) on exit."""
    start_munge()
    name = f"cm{uuid.uuid4().hex[:8]}"
    node = socket.gethostname().split(".")[0]
    for sub in ("state", "spool", "gpus"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for index in range(2):
        (root / "gpus" / f"nvidia{index}").touch()  # slurmd warns that they are not devices, and schedules them
    (root / "slurm.conf").write_text(config(root, name, node, free_ports(2)))
    (root / "gres.conf").write_text(f"NodeName={node} Name=gpu File={root / 'gpus'}/nvidia[0-1]\n")
    found = Cluster(root=root, name=name)
    daemons = []
    try:
        for daemon in ("slurmctld", "slurmd"):
            with (root / f"{daemon}.out").open("wb") as log:  # the daemon keeps its own copy of the fd
                daemons.append(subprocess.Popen([sbin(daemon), "-D", "-f", str(found.conf)], stdout=log,
                                                stderr=subprocess.STDOUT, env=found.env()))
        wait_idle(found, daemons)
        yield found
    finally:
        for proc in daemons:
            proc.terminate()
        for proc in daemons:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_idle(found: Cluster, daemons: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 60
    while True:
        done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=found.env(),
                              timeout=30, check=False)
        if done.returncode == 0 and done.stdout.strip() == "idle":
            return
        dead = [p.args for p in daemons if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = "\n".join((found.root / f"{d}.out").read_text(errors="replace")[-2000:]
                             for d in ("slurmctld", "slurmd"))
            raise RuntimeError(f"the Slurm cluster did not come up (exited: {dead}; sinfo: {done.stdout.strip()} "
                               f"{done.stderr.strip()})\n{logs}")
        time.sleep(0.5)
