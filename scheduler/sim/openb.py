"""The Alibaba GPU cluster trace v2023 (``openb``): its pod list and its node list.

The trace (Weng et al., "Beware of Fragmentation", USENIX ATC '23) records tasks ("pods") of a
production heterogeneous GPU cluster: whole GPUs (``num_gpu`` 1..8) or a share of one GPU
(``num_gpu == 1`` and ``gpu_milli < 1000``), an optional list of GPU models the task accepts
(``gpu_spec``, ``|``-separated), and CPU (``cpu_milli``) and memory (``memory_mib``) on the node.
Times are seconds from the trace start: a pod arrives at ``creation_time`` and holds its
resources for ``deletion_time - scheduled_time``. Pods that were never scheduled (``Pending``
at the end of the trace: no ``scheduled_time``) have no duration and are counted, not replayed.

Both files are read row by row (``csv`` over the open file), so memory grows with the rows
kept, not with the text.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.sim.traces import RowProblem

POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
#: The default and gpushare40 lists have these; multigpu50 has none (shapes only: --fill).
TIME_COLUMNS = ("creation_time", "deletion_time", "scheduled_time")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
#: One GPU, in thousandths: the unit GPU shares are packed in.
MILLI = 1000


@dataclass(frozen=True, slots=True)
class Pod:
    """One task of the trace, as the sharing simulator replays it."""

    name: str
    submit: float
    duration: float
    cpu: int  # milli-CPUs
    memory: int  # MiB
    gpus: int  # whole GPUs (0: a CPU-only task)
    gpu_milli: int  # with gpus == 1: the share of that one GPU (1000: all of it)
    models: frozenset[str] = frozenset()  # GPU models it may run on (empty: any)
    qos: str = ""
    phase: str = ""
    line: int = 0

    @property
    def sharing(self) -> bool:
        """A share of one GPU, packed with other shares on it."""
        return self.gpus == 1 and self.gpu_milli < MILLI

    @property
    def demand(self) -> int:
        """GPU capacity asked for, in thousandths of a GPU."""
        return self.gpu_milli if self.sharing else self.gpus * MILLI

    @property
    def shape(self) -> tuple[int, int, int, int, frozenset[str]]:
        """What placement depends on: pods of one shape fit exactly where each other fit."""
        return (self.cpu, self.memory, self.gpus, self.demand, self.models)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    cpu: int  # milli-CPUs
    memory: int  # MiB
    gpus: int
    model: str


@dataclass
class PodList:
    source: str
    pods: list[Pod]
    problems: list[RowProblem] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    timed: bool = True  # False: no arrival or duration columns; only shapes (--fill)


def is_pod_list(path: str | Path) -> bool:
    """True for a CSV whose header is the openb pod list's."""
    return set(POD_COLUMNS) <= _header(path)


def is_node_list(path: str | Path) -> bool:
    return set(NODE_COLUMNS) <= _header(path)


def _header(path: str | Path) -> set[str]:
    try:
        with open(path, encoding="utf-8-sig") as fh:
            return {h.strip() for h in fh.readline().split(",")}
    except (OSError, UnicodeDecodeError):
        return set()


def _rows(
    path: str | Path, columns: tuple[str, ...], seen: list[str] | None = None
) -> Iterator[tuple[int, dict[str, str]]]:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist; give the openb pod list or node list CSV")
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise UserError(f"{path}: line 1: the header lacks {', '.join(missing)}")
        if seen is not None:
            seen.extend(reader.fieldnames or [])
        for row in reader:
            yield reader.line_num, row


def _int(row: dict[str, str], key: str) -> int:
    raw = (row.get(key) or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{key} {raw!r} is not a number") from None
    if value != value or value < 0 or value != int(value):
        raise ValueError(f"{key} {raw!r} must be a whole number >= 0")
    return int(value)


def load_pods(
    path: str | Path,
    *,
    strict: bool = False,
    limit: int | None = None,
    unscheduled: bool = False,
) -> PodList:
    """The pod list, sorted by arrival; malformed rows reported with their line.

    ``unscheduled``: keep the rows never scheduled (no ``scheduled_time``) as tasks of no
    duration: the FGD paper's fill experiment keeps them (it uses shapes, not times)."""
    out = PodList(str(path), [])
    header: list[str] = []
    for line, row in _rows(path, POD_COLUMNS, header):
        out.timed = set(TIME_COLUMNS) <= set(header)
        try:
            pod = _pod(row, line, out.timed, unscheduled)
        except ValueError as err:
            if strict:
                raise UserError(f"{path}: line {line}: {err} (drop --strict to skip it)") from None
            out.problems.append(RowProblem(line, str(err)))
            continue
        if isinstance(pod, str):
            out.skipped[pod] += 1
        else:
            out.pods.append(pod)
    out.pods.sort(key=lambda p: (p.submit, p.line))
    if limit is not None:
        out.pods = out.pods[:limit]
    return out


def _pod(row: dict[str, str], line: int, timed: bool, unscheduled: bool = False) -> Pod | str:
    if timed and not (row.get("scheduled_time") or "").strip():
        if not unscheduled:
            return "never scheduled (no scheduled_time)"
        row = {**row, "scheduled_time": "0", "deletion_time": "0"}  # no duration
    gpus = _int(row, "num_gpu")
    milli = _int(row, "gpu_milli")
    if gpus == 1 and not 0 < milli <= MILLI:
        raise ValueError(f"gpu_milli {milli} must be 1..1000 for a one-GPU task")
    if gpus > 1 and milli not in (0, MILLI):
        raise ValueError(f"gpu_milli {milli} with {gpus} GPUs: shares are of one GPU only")
    scheduled = _int(row, "scheduled_time") if timed else 0
    deleted = _int(row, "deletion_time") if timed else 0
    if deleted < scheduled:
        raise ValueError(f"deletion_time {deleted} is before scheduled_time {scheduled}")
    spec = (row.get("gpu_spec") or "").strip()
    return Pod(
        name=row["name"].strip(),
        submit=float(_int(row, "creation_time")) if timed else 0.0,
        duration=float(deleted - scheduled),
        cpu=_int(row, "cpu_milli"),
        memory=_int(row, "memory_mib"),
        gpus=gpus,
        gpu_milli=milli if gpus == 1 else (MILLI if gpus else 0),
        models=frozenset(m.strip() for m in spec.split("|") if m.strip()),
        qos=(row.get("qos") or "").strip(),
        phase=(row.get("pod_phase") or "").strip(),
        line=line,
    )


def load_nodes(path: str | Path, machines: int | None = None) -> list[NodeSpec]:
    """The node list (``machines``: only the first N); CPU-only nodes included."""
    nodes = []
    for line, row in _rows(path, NODE_COLUMNS):
        try:
            node = NodeSpec(
                name=row["sn"].strip(),
                cpu=_int(row, "cpu_milli"),
                memory=_int(row, "memory_mib"),
                gpus=_int(row, "gpu"),
                model=row["model"].strip(),
            )
        except ValueError as err:
            raise UserError(f"{path}: line {line}: {err}") from None
        nodes.append(node)
        if machines is not None and len(nodes) >= machines:
            break
    if not nodes:
        raise UserError(f"{path}: no nodes listed")
    return nodes
