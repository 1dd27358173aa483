"""`convmatrix export`'s work: runs judged as `convmatrix report` judges them, made into a bundle
that is safe to publish by construction (docs/atlas.md, "What is kept and what is dropped").

Nothing is copied through: every field of the bundle is taken from an allow-list and made to fit
the reader's pattern for it (atlas/bundle.py), or left out and counted in `dropped`. The verdicts
are the report's (report/model.py's CellRow and CaseRow): export never judges again. A failing
case's reason is a summary built from what is structured (its family, cuDNN's status and
sub-code from --explain), else its message's first line scrubbed (atlas/scrub.py)."""

from __future__ import annotations

import datetime
import hashlib
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from convmatrix import __version__
from convmatrix.atlas import bundle
from convmatrix.atlas.model import (
    FORMAT,
    VERSION,
    Bundle,
    Case,
    Cell,
    Cost,
    Gpu,
    Libraries,
    LoadedFile,
    Repro,
    Run,
    Stack,
)
from convmatrix.atlas.scrub import Secrets, names, scrub, secrets_here
from convmatrix.gpus import CPU_KEY, MIG_PROFILE, key_parts
from convmatrix.matrix.stacks import dotted_cudnn
from convmatrix.matrix.values import LANES
from convmatrix.report.model import CaseRow, CellRow, Report
from convmatrix.results import families, known, libraries, rundir
from convmatrix.results.outcomes import Outcome
from convmatrix.results.read import EPOCH, CellResult, numbered
from convmatrix.results.rundir import records
from convmatrix.results.verdicts import COSTS

# The results-line fields prove/repro.py's spec_of reads, and no other: a case file's own text
# (`source`, `tag`, `workload`, `prefix`) stays home.
REPRO_PARAMS = ("op", "n", "c_in", "c_out", "size", "kernel", "stride", "padding", "dilation", "output_padding",
                "groups", "dtype", "autocast", "memory_format", "layout", "backward", "direction", "via", "bias",
                "benchmark", "deterministic", "tf32")
REPRO_KNOBS = ("cudnn_benchmark", "cudnn_deterministic", "channels_last", "pad_channels", "cudnn_enabled")
# A case's sources are kept only on these hosts, whose pages are public: a link to a fleet's own
# tracker or wiki would name it (and its page is no use to anyone else).
PUBLIC_HOSTS = frozenset({
    "github.com", "gist.github.com", "gitlab.com", "pytorch.org", "docs.pytorch.org", "discuss.pytorch.org",
    "dev-discuss.pytorch.org", "download.pytorch.org", "docs.nvidia.com", "developer.nvidia.com",
    "forums.developer.nvidia.com", "stackoverflow.com", "conda-forge.org", "anaconda.org", "pypi.org", "arxiv.org",
})
_STATUS = re.compile(r"CUDNN_STATUS_[A-Z0-9_]{0,80}[A-Z0-9]", re.ASCII)
# What export never takes, whatever the runs hold (the bundle's `dropped`, `--show` prints it).
DROPPED = (
    "host names (cell.json host, env.json hostname) and user names",
    "paths: run and cell folders, the interpreter, the matrix, the suite, argv, logs, evidence",
    "run names (each run is an opaque digest) and times of day (dates only)",
    "GPU UUIDs, indices and bus ids (a GPU is its model, compute capability and MIG profile)",
    "the environment: variables, platform string, machine, pids, Python version, suite version",
    "the requested stack (the stack is as the cell observed it)",
    "failure messages (a reason is built from family, cuDNN status and sub-code, or the message's "
    "first line scrubbed of paths, addresses, URLs, UUIDs, host and user names, at most 200 characters)",
    "logs, evidence files, --explain's cuDNN logs, timings, fingerprints, first differing lines",
    "case-file text (params source, tag, workload, prefix) and sources off public hosts",
    "CPU-only cells (the atlas is by GPU generation)",
)


@dataclass(frozen=True, kw_only=True)
class Judged:
    """One RUN as `convmatrix report` judges it: its results and its report."""

    path: Path
    results: Sequence[CellResult]
    report: Report


@dataclass(kw_only=True)
class Drops:
    """What export left out of these runs in particular, counted for `dropped`."""

    counts: Counter[str] = field(default_factory=Counter)

    def add(self, what: str, n: int = 1) -> None:
        self.counts[what] += n

    def lines(self) -> list[str]:
        return [f"{n:,} {what}" for what, n in sorted(self.counts.items())]


def bundle_of(runs: Sequence[Judged], *, fleet: str | None, today: datetime.date) -> Bundle:
    """The bundle of runs; fleet: the owner's label (None: an opaque one from the runs' digests)."""
    drops = Drops()
    secrets = secrets_of(runs)
    return assembled(tuple(_run(judged, secrets, drops, today) for judged in runs), fleet=fleet, today=today,
                     drops=drops)


def assembled(runs: tuple[Run, ...], *, fleet: str | None, today: datetime.date, drops: Drops) -> Bundle:
    """The bundle around runs: the label (the owner's, or an opaque one from the runs' digests),
    the date, the tool, and what was dropped."""
    label = fleet or "anon-" + _digest("\0".join(sorted(r.run for r in runs)))[:12]
    return Bundle(fleet=label, created=today.isoformat(), tool=_tool(), runs=runs,
                  dropped=(*DROPPED, *drops.lines())[:bundle.MAX_DROPPED])


def secrets_of(runs: Sequence[Judged]) -> Secrets:
    """What names this fleet in these runs (the hosts they recorded, their folders) and on this
    machine: scrubbed from every message wherever it occurs."""
    results = [r for judged in runs for r in judged.results]
    hosts = {r.host for r in results if r.host} | {str(r.observed["hostname"]) for r in results
                                                   if isinstance(r.observed.get("hostname"), str)}
    places = [*(j.path for j in runs), *(j.path.resolve() for j in runs), *(r.path.parent for r in results)]
    return secrets_here(hosts=sorted(hosts), paths=places)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _tool() -> str:
    return __version__ if bundle.TOOL.fullmatch(__version__) else "unknown"


def run_id(key: str, at: datetime.datetime | None) -> str:
    """An opaque id, the same each time a run is exported (a run in two bundles is one run to the
    atlas): a digest of its key (the run folder's name, as `record` keys it by default) and the
    moment its first cell ended, to the microsecond, which no one can guess back. A run exported
    from its folder and from the history it was recorded in gets the same id."""
    moment = utc(at).isoformat(timespec="microseconds") if at is not None else ""
    return _digest("\0".join(["convmatrix-run", key, moment]))[:16]


def utc(moment: datetime.datetime) -> datetime.datetime:
    """UTC without a zone, as the history stores it (history/record.utc)."""
    return moment.astimezone(datetime.UTC).replace(tzinfo=None) if moment.tzinfo is not None else moment


def first_end(judged: Judged) -> datetime.datetime | None:
    """When the run ran: its first cell's end (as `record` takes it), None when none ended."""
    ended = [r.ended for r in judged.results if r.ended != EPOCH]
    return min(ended) if ended else None


def day_of(at: datetime.datetime | None, today: datetime.date) -> str:
    """The day (UTC) of a moment; no time of day."""
    return (utc(at).date() if at is not None else today).isoformat()


def _run(judged: Judged, secrets: Secrets, drops: Drops, today: datetime.date) -> Run:
    by_path = {(r.cell, str(r.path)): r for r in judged.results}
    rows: dict[tuple[str, str], list[CaseRow]] = {}
    for case in judged.report.cases:
        rows.setdefault((case.cell, case.gpu), []).append(case)
    cells = []
    for row in judged.report.cells:
        result = by_path.get((row.cell, row.path))
        if result is None:  # not one of the results the report was made of: nothing to read
            drops.add("cells without a result to read")
            continue
        made = _cell(row, result, rows.get((row.cell, row.gpu.key), []), judged.report.control, secrets, drops)
        if made is not None:
            cells.append(made)
    at = first_end(judged)
    return Run(run=run_id(judged.path.resolve().name, at), date=day_of(at, today),
               cells=tuple(cells)[:bundle.MAX_CELLS])


def _cell(row: CellRow, result: CellResult, cases: list[CaseRow], control: str | None, secrets: Secrets,
          drops: Drops) -> Cell | None:
    if result.gpu_key == CPU_KEY:
        drops.add("CPU-only cells")
        return None
    gpu = gpu_of(result.gpu_key, result.gpu, secrets)
    if gpu is None:
        drops.add("cells whose GPU has no compute capability on record")
        return None
    stack = stack_of(result.observed, result.lane, drops, secrets)
    lines = _lines(result) if any(c.outcome.failing for c in cases) else {}
    audited = result.cases.get(libraries.CASE)
    return Cell(stack=stack, gpu=gpu, verdict=str(row.verdict), control=row.cell == control,
                cases=tuple(_case(c, result, gpu, lines.get(c.case), secrets, drops) for c in cases
                            if case_id_kept(c.case, secrets, drops))[:bundle.MAX_CASES],
                libraries=libraries_of(libraries.kept(audited.libraries) if audited else None, drops))


def libraries_of(kept: object, drops: Drops) -> Libraries | None:
    """A cell's library audit as the bundle carries it (results/libraries.kept, from the results or
    the history's cells.libraries): whether something was swapped in, each cuDNN file's stem,
    version and origin; no path. A row that fits no pattern is dropped (and said); None without an
    audit or for anything that is not one."""
    if not isinstance(kept, Mapping) or type(kept.get("swapped")) is not bool or not isinstance(kept.get("cudnn"),
                                                                                                 list):
        return None
    files = []
    for row in kept["cudnn"][:libraries.MAX_KEPT]:
        row = row if isinstance(row, Mapping) else {}
        name, version, origin = row.get("name"), row.get("version"), row.get("origin")
        if not (isinstance(name, str) and libraries.STEM.fullmatch(name)):
            drops.add("library names that fit no pattern")
            continue
        fits = isinstance(version, str) and bundle.CUDNN.fullmatch(version) is not None
        files.append(LoadedFile(name=name, version=version if fits else None,
                                origin=origin if origin in libraries.ORIGINS else None))
    return Libraries(swapped=kept["swapped"], cudnn=tuple(files))


def case_id_kept(case: str, secrets: Secrets, drops: Drops) -> bool:
    """Whether a case id may go into the bundle: it fits the pattern and names nothing (a case
    file may be named for the host, the user or the address it was seen on)."""
    if not records.CASE_ID.fullmatch(case):
        drops.add("cases whose id fits no pattern")
        return False
    if names(case, secrets):
        drops.add("cases whose id names a host, a user, a path or an address")
        return False
    return True


def gpu_of(key: str, recorded: Mapping[str, Any] | None, secrets: Secrets) -> Gpu | None:
    """The GPU by model, capability and MIG profile: cell.json's record, else what its key says;
    None when neither gives a compute capability. A model that names the fleet is "unknown"."""
    parts = key_parts(key)
    recorded = recorded or {}
    capability = _fit(recorded.get("capability"), bundle.CAPABILITY) or (parts[1] if parts else None)
    if capability is None or not bundle.CAPABILITY.fullmatch(capability):
        return None
    model = next((m for m in (_fit(recorded.get("name"), bundle.MODEL), _fit(parts[0] if parts else None, bundle.MODEL))
                  if m is not None and not names(m, secrets)), "unknown")
    mig = _fit(recorded.get("mig_profile"), MIG_PROFILE)
    if mig is None and parts and parts[2]:
        mig = _fit(_profile_of_slug(parts[2]), MIG_PROFILE)
    return Gpu(model=model[:64], capability=capability, generation=bundle.generation_of(capability), mig=mig)


def _profile_of_slug(slug: str) -> str:
    """A MIG profile back from its key's spelling (gpus.slug): 1c-3g-71gb -> 1c.3g.71gb, 1g-18gb-plus-me
    -> 1g.18gb+me."""
    return re.sub(r"(?<=[0-9][cg])-", ".", slug.replace("-plus-", "+"))


def _fit(value: object, pattern: re.Pattern[str]) -> str | None:
    return value if isinstance(value, str) and pattern.fullmatch(value) else None


def stack_of(observed: Mapping[str, Any], lane: str, drops: Drops, secrets: Secrets) -> Stack:
    """The stack env.json observed, each version fitted to its pattern (None where it fits none,
    or where a local version label names the fleet: 2.5.0a0+gpu7, a build labelled by its host)."""
    cudnn = observed.get("cudnn")
    if isinstance(cudnn, str) and cudnn.isascii() and cudnn.isdigit() and len(cudnn) <= 6:
        cudnn = int(cudnn)  # as the history stores it: "91900"
    if type(cudnn) is int and 0 < cudnn < 1_000_000:  # torch.backends.cudnn.version(): 91900
        cudnn = dotted_cudnn(cudnn)
    seen = {"torch": (observed.get("torch"), bundle.TORCH), "cuda": (observed.get("cuda"), bundle.CUDA),
            "cudnn": (cudnn, bundle.CUDNN), "driver": (observed.get("driver"), bundle.DRIVER),
            "image_digest": (observed.get("image_id"), bundle.IMAGE)}
    kept = {name: _fit(value, pattern) for name, (value, pattern) in seen.items()}
    if kept["torch"] is not None and names(kept["torch"], secrets):
        kept["torch"] = None
    for name, (value, _pattern) in seen.items():
        if value not in (None, "") and kept[name] is None:
            drops.add(f"observed {name} values that fit no version pattern")
    return Stack(**kept, lane=lane if lane in LANES else "host")


def _lines(result: CellResult) -> dict[str, dict[str, Any]]:
    """Each case's last sound results line, read once for the cell (as prove/repro.case_line reads
    one case's): the repro's fields are there, not in the report."""
    try:
        text = rundir.read_plain(result.path / rundir.RESULTS, rundir.MAX_RESULTS, result.path)
    except OSError:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for _number, line in numbered(text.decode("utf-8", errors="replace")):
        if isinstance(line, dict) and isinstance(line.get("case"), str):
            found[line["case"]] = line
    return {case: line for case, line in found.items() if not records.result_problems(line)}


def _case(row: CaseRow, result: CellResult, gpu: Gpu, line: dict[str, Any] | None, secrets: Secrets,
          drops: Drops) -> Case:
    failing = row.outcome.failing
    family = row.family if row.family in families.FAMILIES else None
    return Case(case=row.case, verdict=str(row.verdict), outcome=str(row.outcome), family=family,
                subcode=subcode_of(row) if failing else None,
                reason=reason_of(row, family, secrets) if failing or row.outcome == Outcome.MISSING else None,
                known=known_ids(row, result, gpu) if failing else (),
                sources=public_sources(row.sources, drops, secrets),
                repro=repro_of(line, result.observed, drops, secrets) if failing and line is not None else None,
                cost=None if row.cost is None else cost_of(
                    str(row.verdict), (row.cost.backend, row.cost.control_backend),
                    (row.cost.memory_ratio, row.cost.time_ratio, row.cost.time_low), drops))


COST_VERDICTS = frozenset(str(v) for v in COSTS)


def cost_of(verdict: str, backends: tuple[Any, Any], ratios: tuple[Any, Any, Any], drops: Drops) -> Cost | None:
    """A case's cost (results.verdicts.Cost, or the history's columns of it: its backend and the
    control's; its memory and time ratios and the time's lower bound) where its verdict is one
    (fallback, memory, slower); none elsewhere (a green case's cost would double a fleet's bundle).
    A backend name fits torch's names or is dropped; a ratio is a finite number within the bound."""
    if verdict not in COST_VERDICTS:
        return None
    names: list[str | None] = []
    for name in backends:
        if name is not None and not (isinstance(name, str) and bundle.BACKEND.fullmatch(name)):
            drops.add("backend names that fit no pattern")
            name = None
        names.append(name)
    kept = [float(r) if type(r) in (int, float) and 0 <= r <= bundle.MAX_RATIO else None for r in ratios]
    return Cost(backend=names[0], control_backend=names[1], memory_ratio=kept[0], time_ratio=kept[1],
                time_ratio_low=kept[2])


def subcode_of(row: CaseRow) -> int | None:
    """cuDNN's status number: --explain's, else the one its message names."""
    explained = row.explained
    if explained is not None and type(explained.subcode) is int and 0 <= explained.subcode <= bundle.MAX_SUBCODE:
        return explained.subcode
    named = _STATUS.search(row.message or "")
    number = families.status_code(named[0]) if named else None
    return number if number is not None and 0 <= number <= bundle.MAX_SUBCODE else None


def reason_of(row: CaseRow, family: str | None, secrets: Secrets) -> str:
    """One line: the family with cuDNN's status, sub-code and their meaning (from convmatrix's own
    table, not the log) where --explain found them, else with the message's first line scrubbed."""
    prefix = family or str(row.outcome)
    explained = row.explained
    status = explained.status if explained is not None and explained.status else None
    if status is not None and _STATUS.fullmatch(status):
        return structured(prefix, status, subcode_of(row))
    said = scrub(row.message or "", secrets)
    return f"{prefix}: {said}" if said else prefix


def structured(prefix: str, status: str, number: int | None) -> str:
    """'cudnn_not_supported: CUDNN_STATUS_NOT_SUPPORTED_SHAPE (3002): no engine supports this
    tensor shape': the status's meaning from convmatrix's own table (results/families.py)."""
    meaning, _cause = families.explain_status(status)
    return f"{prefix}: {status}{f' ({number})' if number is not None else ''}: {meaning}"[:bundle.MAX_TEXT]


def known_ids(row: CaseRow, result: CellResult, gpu: Gpu) -> tuple[str, ...]:
    """The ids of the known upstream issues the failure meets, as the report annotates them
    (report/model.annotate_known: its params on the stack the cell observed)."""
    observed = result.observed
    stack = known.Stack(torch=_text(observed.get("torch")), cuda=_text(observed.get("cuda")),
                        cudnn=known.cudnn_number(observed.get("cudnn")), capability=gpu.capability)
    found = known.match(row.params, stack, family=row.family, message=row.message, failed=True)
    return tuple(i.id for i in found if bundle.KNOWN.fullmatch(i.id))[:bundle.MAX_LIST]


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def public_sources(sources: Sequence[str], drops: Drops, secrets: Secrets) -> tuple[str, ...]:
    """The sources on a public host (PUBLIC_HOSTS), https or http, no user, password, port or
    query (where tokens go: ?access_token=, ?sig=), and no name of the fleet's in them."""
    kept = []
    for url in sources:
        try:
            parts = urlsplit(url)
            public = (parts.scheme in ("https", "http") and parts.hostname in PUBLIC_HOSTS and parts.port is None
                      and "@" not in parts.netloc and not parts.query and len(url) <= bundle.MAX_URL
                      and bundle.URL.fullmatch(url) is not None and not names(url, secrets, shapes=False))
        except ValueError:  # a port that is no number, a bad IPv6 literal
            public = False
        if public:
            kept.append(url)
        else:
            drops.add("case sources off the public hosts")
    return tuple(dict.fromkeys(kept))[:bundle.MAX_LIST]


def repro_of(line: Mapping[str, Any], observed: Mapping[str, Any], drops: Drops, secrets: Secrets) -> Repro | None:
    """The results-line fields prove/repro.py's spec_of reads (REPRO_PARAMS, the shapes, REPRO_KNOBS,
    the device), each value one the bundle takes; None for a line without params (crashed)."""
    params = line.get("params")
    if not isinstance(params, dict) or not params:
        return None
    shapes, knobs = line.get("shapes"), line.get("knobs")
    device = next((d for d in (observed.get("device"), line.get("device")) if d in bundle.DEVICES), "cuda")
    return Repro(params=_table(params, REPRO_PARAMS, drops, secrets),
                 shapes=_table(shapes, bundle.SHAPES, drops, secrets) if isinstance(shapes, dict) else None,
                 knobs=_table(knobs, REPRO_KNOBS, drops, secrets) if isinstance(knobs, dict) else {}, device=device)


def _table(found: Mapping[str, Any], allowed: Sequence[str], drops: Drops, secrets: Secrets) -> dict[str, Any]:
    kept = {}
    for key in allowed:
        if key not in found:
            continue
        value = found[key]
        if isinstance(value, str) and bundle.scalar(value) and names(value, secrets):
            drops.add("repro words that name a host, a user or an address")
        elif bundle.scalar(value) or (isinstance(value, list) and len(value) <= bundle.MAX_LIST
                                    and all(bundle.integer(x) for x in value)):
            kept[key] = value
        else:
            drops.add("repro values the bundle cannot hold")
    return kept


def show(made: Bundle) -> list[str]:
    """What --show prints: what the bundle keeps, run by run, then what it drops."""
    size = bundle.summary(made)
    lines = [f"bundle of fleet {made.fleet}: {size['runs']} run(s), {size['cells']} cell(s), {size['cases']} case(s); "
             f"format {FORMAT} version {VERSION}", "kept:"]
    for run in made.runs:
        lines.append(f"  run {run.run} of {run.date}: {len(run.cells)} cell(s)")
        for cell in run.cells:
            s, g = cell.stack, cell.gpu
            failing = sum(1 for c in cell.cases if Outcome(c.outcome).failing)
            lines.append(
                f"    {g.model} {g.generation}{f' MIG {g.mig}' if g.mig else ''}, torch {s.torch or '?'}, "
                f"CUDA {s.cuda or '?'}, cuDNN {s.cudnn or '?'}, driver {s.driver or '?'}"
                f"{f', image {s.image_digest}' if s.image_digest else ''} ({s.lane}): {cell.verdict}"
                f"{', control' if cell.control else ''}; {len(cell.cases)} case(s), {failing} failing")
    lines.append("  per case: its id, verdict, outcome, family, cuDNN sub-code, reason, known-issue ids, "
                 "public sources; for a failing case the repro's params, shapes, knobs and device")
    lines.append("dropped:")
    lines += [f"  - {line}" for line in made.dropped]
    return lines
