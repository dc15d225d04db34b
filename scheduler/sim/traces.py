"""Job traces for the simulator: the Philly job log, its derived CSV, and a generic CSV.

Every loader yields the same ``TraceJob`` rows so the driver never cares where a trace came
from. Times are seconds since ``PHILLY_EPOCH`` (naive, as the trace's own strings are), the
origin the derived Philly CSV already uses, so the JSON and the CSV of one trace agree.

Rows fall into three kinds, all accounted for, none dropped silently:
- runnable: replayed with their recorded service time (failed and killed jobs too);
- not runnable by the trace's own rules (no attempts, a start or end missing, zero GPUs):
  counted in ``Trace.skipped`` by reason, as the Philly analysis notebook does;
- malformed (missing keys, unparsable numbers or times): reported with their line number in
  ``Trace.problems``, or, with ``strict``, a ``UserError`` naming the first one.

The generic CSV, for converting any other trace, has a header row and these columns:
``submit_time`` (seconds, or ``YYYY-MM-DD HH:MM:SS``), ``vc``, ``user``, ``gpus``, ``duration``
(seconds of service), ``status`` (free text, e.g. Pass/Failed/Killed; may be empty); optional:
``job_id``, ``cpu``, ``memory_mb``.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import itertools
import json
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from labhive.scheduler.core.errors import UserError

PHILLY_EPOCH = datetime(2017, 8, 7)
#: Helios' traces start in 2020 (Venus, Earth, Saturn, Uranus: April-September 2020).
HELIOS_EPOCH = datetime(2020, 1, 1)
TraceFormat = Literal["philly-json", "philly-csv", "generic-csv", "tiresias-csv", "helios-csv"]
ServiceTime = Literal["run", "span"]
#: Values the Philly log uses for "no time" (the string "None" in the real file).
_MISSING = (None, "", "None", "none", "null")

#: No GPU count, read as a global once a row (``_generic_fast``).
_INF = math.inf
#: A text value without the spaces around it (``_generic_fast``: mapped over a row's texts).
_strip = str.strip
GENERIC_COLUMNS = ("submit_time", "vc", "user", "gpus", "duration", "status")
PHILLY_CSV_COLUMNS = ("jobid", "vc", "user", "status", "submit_time_s", "gpus", "run_time_s")
#: Tiresias' simulator input (github.com/SymbioticLab/Tiresias, simulator/*_job.csv); it has
#: no VCs or users: every job goes to VC ``default``, user ``tiresias``.
TIRESIAS_COLUMNS = ("job_id", "num_gpu", "submit_time", "duration")
#: Helios' cluster logs (github.com/S-Lab-System-Group/HeliosData, cluster_log.csv per
#: cluster): ``submit_time`` a date, ``duration`` seconds, ``gpu_num`` 0 for CPU jobs.
HELIOS_COLUMNS = ("job_id", "user", "vc", "gpu_num", "submit_time", "duration", "state")


@dataclass(slots=True, unsafe_hash=True)
class TraceJob:
    """One job to replay: arrives at ``submit``, needs ``gpus`` for ``duration`` seconds.

    Read-only by convention, not frozen: a frozen dataclass costs 3.5 times as much to build
    (1.3 against 0.4 us), and a million-job trace builds one per row; it hashes as a frozen
    one did (``unsafe_hash``)."""

    job_id: str
    submit: float
    vc: str
    user: str
    gpus: int
    duration: float
    status: str = "Pass"
    line: int = 0
    cpu: float | None = None
    memory_mb: int | None = None


#: A ``TraceJob``'s fields as a tuple, in field order (in C): a *row*, what the simulator
#: reads of a job (``workload.iter_sim_jobs``), and what a streamed CSV's common row is made
#: as, without the ``TraceJob`` (``iter_trace(rows=True)``).
trace_row: Callable[[TraceJob], tuple[Any, ...]] = operator.attrgetter(
    "job_id", "submit", "vc", "user", "gpus", "duration", "status", "line", "cpu", "memory_mb"
)


@dataclass(frozen=True, slots=True)
class RowProblem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


#: SHA-256 (first 16 hex digits) of the first job record of each SYNTHETIC Philly-format file
#: shipped in ``shared/data/philly/synthetic/`` (the JSON log, its derived CSV, the 1,000-job
#: sample): a copy under any name, or a prefix of one, is still known for what it is. Slices
#: and re-timed copies are known by their jobs (``synthetic.py``).
SYNTHETIC_FIRST_RECORDS = frozenset({"3bba8ca5cae969a3", "55192e6ab567698c", "520aa8c9bd63ee56"})


def is_synthetic(text: str) -> bool:
    """Whether the trace is one of the generated Philly-format files, by its content."""
    lines = text.split("\n", 2)
    first = lines[1].rstrip("\r") if len(lines) > 1 else ""
    digest = hashlib.sha256(first.encode()).hexdigest()[:16]
    return digest in SYNTHETIC_FIRST_RECORDS


def file_is_synthetic(path: str | Path) -> bool:
    """``is_synthetic`` for a file, reading only its first lines (plain or gzipped)."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    opener: Any = gzip.open if gz else open
    try:
        with opener(path, "rt", encoding="utf-8-sig") as fh:
            return is_synthetic(fh.readline() + fh.readline())
    except (OSError, UnicodeDecodeError):
        return False


@dataclass
class Trace:
    source: str
    format: TraceFormat
    jobs: list[TraceJob]
    problems: list[RowProblem] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    synthetic: bool = False  # generated, not recorded (``is_synthetic``)

    def limited(self, n: int | None) -> Trace:
        """The first ``n`` jobs in submit order (a prefix keeps arrival gaps real)."""
        if n is None or n >= len(self.jobs):
            return self
        return replace(self, jobs=self.jobs[:n])


class _RowError(ValueError):
    """A malformed row; the loader records it with the row's line."""


def load_trace(
    path: str | Path,
    fmt: TraceFormat | None = None,
    *,
    strict: bool = False,
    service_time: ServiceTime = "run",
    limit: int | None = None,
) -> Trace:
    """Load any supported trace; the format is sniffed when not given."""
    path = _existing(path)
    text = _read_text(path)
    fmt = fmt or sniff_format(text, path)
    trace = Trace(str(path), fmt, [])
    trace.jobs.extend(_rows(trace, io.StringIO(text), text, service_time))
    if strict and trace.problems:
        raise UserError(
            f"{path}: {trace.problems[0]} ({len(trace.problems)} malformed rows in all; "
            "fix them or drop --strict to skip them)"
        )
    trace.jobs.sort(key=lambda j: (j.submit, j.line))
    from labhive.scheduler.sim.synthetic import jobs_are_synthetic

    trace.synthetic = is_synthetic(text) or jobs_are_synthetic(trace.jobs)
    return trace.limited(limit)


def iter_trace(
    path: str | Path,
    fmt: TraceFormat | None = None,
    *,
    service_time: ServiceTime = "run",
    into: Trace | None = None,
    rows: bool = False,
) -> Iterator[Any]:
    """The trace's runnable jobs one at a time, in file order, for traces too big to hold as
    a list (a million jobs): a CSV is read line by line; a Philly JSON log is held as text
    but its jobs are parsed as they are asked for. Skipped and malformed rows are counted in
    ``into`` (its ``jobs`` stay empty) as they pass. The simulator needs the jobs sorted by
    submit time, as the Philly log and the CSVs written here are; ``load_trace`` sorts.

    ``rows``: each job as its ``trace_row`` instead, as the simulator reads it (a generic
    CSV's common row is made as that tuple: no ``TraceJob`` a job, 32 bytecodes)."""
    path = _existing(path)
    opener: Any = gzip.open if _gzipped(path) else open
    with opener(path, "rt", encoding="utf-8-sig", newline="") as fh:
        try:
            head = fh.read(4096) + fh.readline()  # whole lines, for the sniffer
            fmt = fmt or sniff_format(head, path)
            trace = into if into is not None else Trace(str(path), fmt, [])
            trace.format = fmt
            if fmt == "philly-json":
                text = head + fh.read()
                jobs = _rows(trace, (), text, service_time)
                yield from map(trace_row, jobs) if rows else jobs
            else:
                lines = itertools.chain(head.splitlines(keepends=True), fh)
                yield from _rows(trace, lines, "", service_time, rows)
        except UnicodeDecodeError as err:
            raise UserError(
                f"{path} is not UTF-8 text ({err.reason}); give a JSON or CSV trace"
            ) from None


class JobStream:
    """A trace file's jobs in submit order, read afresh each time they are iterated (one
    pass per policy), never held as a list; ``len`` is how many it yields."""

    def __init__(self, path: Path, fmt: TraceFormat, service_time: ServiceTime, count: int):
        self.path, self.format, self.service_time, self.count = path, fmt, service_time, count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[TraceJob]:
        jobs = iter_trace(self.path, self.format, service_time=self.service_time)
        return itertools.islice(jobs, self.count)

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """The same jobs as ``trace_row`` tuples (``iter_trace(rows=True)``)."""
        rows = iter_trace(self.path, self.format, service_time=self.service_time, rows=True)
        return itertools.islice(rows, self.count)


def scan_trace(
    path: str | Path,
    fmt: TraceFormat | None = None,
    *,
    strict: bool = False,
    service_time: ServiceTime = "run",
    limit: int | None = None,
) -> tuple[Trace, JobStream] | None:
    """``load_trace`` for a file already in submit order, without keeping its jobs: one
    pass counts them (and the skipped and malformed rows, for the report) and checks the
    order; the jobs themselves are read again as a ``JobStream`` when replayed, the first
    ``limit`` of them. None when the file is out of submit order: ``load_trace`` sorts it;
    None too for a Philly JSON log, which is held as text to be read at all (streaming it
    would save little memory and cost a parse per pass)."""
    path = _existing(path)
    fmt = fmt or _sniff_file(path)
    if fmt == "philly-json":
        return None
    from labhive.scheduler.sim.synthetic import CHECKED, SyntheticCheck

    trace = Trace(str(path), fmt, [])
    count, last = 0, -math.inf
    synthetic = SyntheticCheck()
    for job in iter_trace(path, fmt, service_time=service_time, into=trace):
        if not job.submit >= last:  # out of order (or no time): sorting is needed
            return None
        count, last = count + 1, job.submit
        if count <= CHECKED:
            synthetic.feed(job)
    if strict and trace.problems:
        raise UserError(
            f"{path}: {trace.problems[0]} ({len(trace.problems)} malformed rows in all; "
            "fix them or drop --strict to skip them)"
        )
    trace.synthetic = synthetic.found or file_is_synthetic(path)
    count = count if limit is None else min(count, limit)
    return trace, JobStream(path, trace.format, service_time, count)


def _sniff_file(path: Path) -> TraceFormat:
    """The format of a trace file, from its first lines (as ``iter_trace`` sniffs it)."""
    opener: Any = gzip.open if _gzipped(path) else open
    with opener(path, "rt", encoding="utf-8-sig", newline="") as fh:
        try:
            return sniff_format(fh.read(4096) + fh.readline(), path)
        except UnicodeDecodeError as err:
            raise UserError(
                f"{path} is not UTF-8 text ({err.reason}); give a JSON or CSV trace"
            ) from None


def _rows(
    trace: Trace, lines: Iterable[str], text: str, service_time: ServiceTime, rows: bool = False
) -> Iterator[Any]:
    """The runnable jobs of ``trace.format`` (as ``trace_row`` tuples with ``rows``, for a
    CSV); problems and skips go to ``trace``. (The reader's own generator, not one that
    yields from it: a level less for each job.)"""
    if trace.format == "philly-json":
        return _iter_json_rows(trace, text, service_time)
    if trace.format == "philly-csv":
        return _iter_csv(trace, lines, _philly_csv_row(service_time), PHILLY_CSV_COLUMNS, rows)
    if trace.format == "tiresias-csv":
        return _iter_csv(trace, lines, _tiresias_row, TIRESIAS_COLUMNS, rows)
    if trace.format == "helios-csv":
        return _iter_csv(trace, lines, _helios_row, HELIOS_COLUMNS, rows)
    required = tuple(c for c in GENERIC_COLUMNS if c != "status")
    return _iter_csv(trace, lines, _generic_row, required, rows)


def _iter_json_rows(trace: Trace, text: str, service_time: ServiceTime) -> Iterator[TraceJob]:
    for line, obj in _iter_json_array(text, trace.source):
        job = _take(trace, line, _philly_json_row, obj, line, service_time)
        if job is not None:
            yield job


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"trace {path} does not exist; give a Philly cluster_job_log or a CSV")
    return path


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UserError(
            f"{path} is not UTF-8 text (byte {err.start}); give a JSON or CSV trace"
        ) from None


def _gzipped(path: Path) -> bool:
    with open(path, "rb") as raw:
        return raw.read(2) == b"\x1f\x8b"


def sniff_format(text: str, path: Path | str = "") -> TraceFormat:
    """JSON if it opens with ``[``; otherwise the CSV header tells Philly-derived from generic."""
    head = text.lstrip()[:1]
    if head == "[":
        return "philly-json"
    header = next(csv.reader(io.StringIO(text.split("\n", 1)[0])), [])
    names = {h.strip() for h in header}
    if set(PHILLY_CSV_COLUMNS) <= names:
        return "philly-csv"
    if set(HELIOS_COLUMNS) <= names:
        return "helios-csv"
    if set(TIRESIAS_COLUMNS) <= names and "vc" not in names:
        return "tiresias-csv"
    if set(GENERIC_COLUMNS) - {"status"} <= names:
        return "generic-csv"
    raise UserError(
        f"{path}: cannot tell the trace format: expected a Philly cluster_job_log (a JSON array), "
        f"the derived Philly CSV (columns {', '.join(PHILLY_CSV_COLUMNS)}), Tiresias' job CSV "
        f"({', '.join(TIRESIAS_COLUMNS)}), Helios' cluster_log.csv ({', '.join(HELIOS_COLUMNS)}), "
        f"or the generic CSV "
        f"(columns {', '.join(GENERIC_COLUMNS)}); found header {', '.join(sorted(names))}"
    )


# ---- Philly JSON -------------------------------------------------------------------------


def _iter_json_array(text: str, source: str) -> Iterator[tuple[int, Any]]:
    """Elements of one JSON array with the line each starts on, so a bad row can be named."""
    decoder = json.JSONDecoder()
    ws = " \t\r\n"
    n = len(text)
    pos = len(text) - len(text.lstrip())
    if text[pos : pos + 1] != "[":
        raise UserError(f"{source}: expected a JSON array of jobs ('[' at the start)")
    pos += 1
    line = 1 + text.count("\n", 0, pos)
    last = pos
    while True:
        while pos < n and text[pos] in ws:
            pos += 1
        if pos < n and text[pos] == "]":
            return
        line += text.count("\n", last, pos)
        last = pos
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            raise UserError(
                f"{source}: line {err.lineno}: broken JSON ({err.msg}); the rest of the file "
                "cannot be read"
            ) from None
        yield line, obj
        while pos < n and text[pos] in ws:
            pos += 1
        if pos < n and text[pos] == ",":
            pos += 1
        elif pos < n and text[pos] == "]":
            return
        else:
            raise UserError(
                f"{source}: line {line + text.count(chr(10), last, pos)}: "
                "expected ',' or ']' after a job"
            )


def parse_philly_time(value: Any) -> float | None:
    """Seconds since ``PHILLY_EPOCH``, or None for the log's missing-time markers."""
    if value in _MISSING:
        return None
    if not isinstance(value, str):
        raise _RowError(f"time {value!r} is not a 'YYYY-MM-DD HH:MM:SS' string")
    try:
        return (datetime.fromisoformat(value) - PHILLY_EPOCH).total_seconds()
    except ValueError:
        raise _RowError(f"time {value!r} is not 'YYYY-MM-DD HH:MM:SS'") from None


def _take(
    trace: Trace, line: int, parse: Callable[..., TraceJob | str], *row: Any
) -> TraceJob | None:
    """One row: a job, or None with the reason to skip it or its problem noted in ``trace``."""
    try:
        job = parse(*row)
    except _RowError as err:
        trace.problems.append(RowProblem(line, str(err)))
        return None
    if isinstance(job, str):
        trace.skipped[job] += 1
        return None
    return job


def _philly_json_row(obj: Any, line: int, service_time: ServiceTime) -> TraceJob | str:
    """A runnable job, or the reason (a str) the trace's rules say it cannot be replayed."""
    if not isinstance(obj, dict):
        raise _RowError(f"a job must be a JSON object, not {type(obj).__name__}")
    missing = [k for k in ("jobid", "vc", "submitted_time", "attempts") if k not in obj]
    if missing:
        raise _RowError(f"missing {', '.join(missing)}")
    submit = parse_philly_time(obj["submitted_time"])
    if submit is None:
        raise _RowError("submitted_time is missing")
    attempts = obj["attempts"]
    if not isinstance(attempts, list):
        raise _RowError("attempts must be a list")
    if not attempts:
        return "no attempts"
    first = attempts[0]
    if not isinstance(first, dict) or not isinstance(first.get("detail", []), list):
        raise _RowError("an attempt must be an object with a detail list")
    gpus = 0
    for d in first.get("detail", []):
        if not isinstance(d, dict) or not isinstance(d.get("gpus", []), list):
            raise _RowError("attempt detail entries must be {ip, gpus: [...]}")
        gpus += len(d.get("gpus", []))
    run = 0.0
    starts: list[float] = []
    ends: list[float] = []
    complete = True
    for a in attempts:
        if not isinstance(a, dict):
            raise _RowError("an attempt must be an object")
        start = parse_philly_time(a.get("start_time"))
        end = parse_philly_time(a.get("end_time"))
        if start is None or end is None:
            complete = False
        else:
            run += max(0.0, end - start)
            starts.append(start)
            ends.append(end)
    if not complete:
        return "attempt without start or end"
    if gpus == 0:
        return "zero GPUs"
    duration = run if service_time == "run" else max(ends) - min(starts)
    return TraceJob(
        job_id=str(obj["jobid"]),
        submit=submit,
        vc=str(obj["vc"]),
        user=str(obj.get("user", "")),
        gpus=gpus,
        duration=duration,
        status=str(obj.get("status", "")),
        line=line,
    )


# ---- CSVs --------------------------------------------------------------------------------


def _iter_csv(
    trace: Trace, lines: Iterable[str], parse_row: Any, required: tuple[str, ...], rows: bool
) -> Iterator[Any]:
    """The CSV's jobs, as ``TraceJob``s, or as ``trace_row`` tuples with ``rows`` (a common
    row by position is made as its tuple: ``_generic_fast``)."""
    reader = csv.reader(lines)  # DictReader's work, without its per-row checks in Python
    fields = [f.strip() for f in next(reader, [])]
    missing = [c for c in required if c not in fields]
    if missing:
        raise UserError(
            f"{trace.source}: line 1: the header lacks {', '.join(missing)} ({trace.format} trace)"
        )
    width = len(fields)
    fast = _generic_fast(fields) if parse_row is _generic_row else None
    # (The common row's tests first: a blank line is also one of the wrong width, and a row
    # read by position is yielded without a second test for None. Once a row.)
    for values in reader:
        line = reader.line_num
        if len(values) != width:
            if values:  # (else a blank line)
                trace.problems.append(RowProblem(line, "wrong number of columns"))
            continue
        row = fast(values, line) if fast is not None else None
        if row is not None:
            yield row if rows else TraceJob(*row)
            continue
        job = _take(trace, line, parse_row, dict(zip(fields, values, strict=True)), line)
        if job is not None:
            yield trace_row(job) if rows else job


def _generic_fast(fields: list[str]) -> Callable[[list[str], int], tuple[Any, ...] | None]:
    """``_generic_row`` for a well-formed row, by column position (a million-row trace
    spent a third of its reading time building each row's dict), as its ``trace_row``. Any
    row it is unsure of (None) goes the general way, which says what is wrong with it or why
    it is skipped."""
    at = {name: i for i, name in enumerate(fields)}  # the last of equal names, as a dict
    job_i, status_i = at.get("job_id"), at.get("status")
    if "cpu" in at or "memory_mb" in at:
        return lambda values, line: None  # rare columns: the general way
    # A row's numbers and texts taken in one C call each, converted (``float``) and stripped
    # (``str.strip``) in C by ``map``, not by a call apiece (once a row of a million-row
    # trace); a file without a job_id or status column has the vc read in its place, unused
    # (``has_id``, ``has_status``).
    numbers = operator.itemgetter(at["submit_time"], at["gpus"], at["duration"])
    texts = operator.itemgetter(
        at["vc"],
        at["user"],
        at["vc"] if job_i is None else job_i,
        at["vc"] if status_i is None else status_i,
    )
    has_id, has_status = job_i is not None, status_i is not None

    def parse(values: list[str], line: int) -> tuple[Any, ...] | None:
        try:  # (``float`` skips the spaces around a number itself: no ``strip`` first)
            submit, gpus_f, duration = map(float, numbers(values))
        except ValueError:
            return None  # (also a number between control characters, which ``strip`` drops)
        if not (0.0 < gpus_f < _INF and duration >= 0.0):
            return None  # NaN, infinite, negative or no GPUs; a NaN or negative duration
        gpus = int(gpus_f)
        vc, user, job_id, status = map(_strip, texts(values))
        if gpus != gpus_f or not vc:
            return None  # a fraction of a GPU, no VC
        # ``trace_row`` of its ``TraceJob``, built as the tuple (no cpu, no memory: the
        # columns are not there): once per row.
        return (
            job_id if has_id and job_id else f"job-{line}",
            submit,
            vc,
            user,
            gpus,
            duration,
            status if has_status and status else "Pass",
            line,
            None,
            None,
        )

    return parse


def _number(row: dict[str, str], key: str, *, integer: bool = False) -> float:
    raw = row.get(key, "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise _RowError(f"{key} {raw!r} is not a number") from None
    if value != value or value < 0:
        raise _RowError(f"{key} {raw!r} must be a non-negative number")
    if integer and (value == math.inf or value != int(value)):
        raise _RowError(f"{key} {raw!r} must be a whole number")
    return value


def _philly_csv_row(service_time: ServiceTime) -> Any:
    def parse(row: dict[str, str], line: int) -> TraceJob | str:
        if row.get("gpus", "").strip() == "":
            return "no attempts"
        if row.get("complete", "1").strip() not in ("1", "1.0"):
            return "attempt without start or end"
        gpus = int(_number(row, "gpus", integer=True))
        if gpus == 0:
            return "zero GPUs"
        key = "run_time_s" if service_time == "run" else "duration_s"
        return TraceJob(
            job_id=row["jobid"].strip(),
            submit=_number(row, "submit_time_s"),
            vc=row["vc"].strip(),
            user=row["user"].strip(),
            gpus=gpus,
            duration=_number(row, key),
            status=row["status"].strip(),
            line=line,
        )

    return parse


def _tiresias_row(row: dict[str, str], line: int) -> TraceJob | str:
    """A row of Tiresias' ``*_job.csv``: ``submit_time`` and ``duration`` in seconds (its
    ``iterations``, ``model_name`` and ``interval`` do not change when or how long a job runs
    in Tiresias' own simulator either)."""
    gpus = int(_number(row, "num_gpu", integer=True))
    if gpus == 0:
        return "zero GPUs"
    return TraceJob(
        job_id=row["job_id"].strip() or f"job-{line}",
        submit=_number(row, "submit_time"),
        vc="default",
        user="tiresias",
        gpus=gpus,
        duration=_number(row, "duration"),
        line=line,
    )


#: Helios' job states as the replay reports them (TIMEOUT and NODE_FAIL are failures, as Helios
#: counts them; every GPU job replays its recorded duration, whatever its state).
_HELIOS_STATUS = {"COMPLETED": "Pass", "CANCELLED": "Killed"}


def _helios_row(row: dict[str, str], line: int) -> TraceJob | str:
    """A row of Helios' ``cluster_log.csv``; CPU-only jobs (``gpu_num`` 0) are skipped,
    counted, as Helios' GPU simulator skips them."""
    gpus = int(_number(row, "gpu_num", integer=True))
    if gpus == 0:
        return "zero GPUs"
    raw_submit = row["submit_time"].strip()
    try:
        submit = float(raw_submit)
    except ValueError:
        try:
            submit = (datetime.fromisoformat(raw_submit) - HELIOS_EPOCH).total_seconds()
        except ValueError:
            raise _RowError(
                f"submit_time {raw_submit!r} is neither seconds nor YYYY-MM-DD HH:MM:SS"
            ) from None
    vc = row["vc"].strip()
    if not vc:
        raise _RowError("vc is empty")
    state = row["state"].strip().upper()
    return TraceJob(
        job_id=row["job_id"].strip() or f"job-{line}",
        submit=submit,
        vc=vc,
        user=row["user"].strip(),
        gpus=gpus,
        duration=_number(row, "duration"),
        status=_HELIOS_STATUS.get(
            state, "Failed"
        ),  # FAILED, TIMEOUT, NODE_FAIL: failed, as Helios counts them
        line=line,
    )


def _generic_row(row: dict[str, str], line: int) -> TraceJob | str:
    raw_submit = row["submit_time"].strip()
    try:
        submit = float(raw_submit)
    except ValueError:
        submit_or_none = parse_philly_time(raw_submit)
        if submit_or_none is None:
            raise _RowError("submit_time is empty") from None
        submit = submit_or_none
    gpus = int(_number(row, "gpus", integer=True))
    if gpus == 0:
        return "zero GPUs"
    vc = row["vc"].strip()
    if not vc:
        raise _RowError("vc is empty")
    cpu = _number(row, "cpu") if row.get("cpu", "").strip() else None
    mem = int(_number(row, "memory_mb", integer=True)) if row.get("memory_mb", "").strip() else None
    return TraceJob(
        job_id=(row.get("job_id") or "").strip() or f"job-{line}",
        submit=submit,
        vc=vc,
        user=row["user"].strip(),
        gpus=gpus,
        duration=_number(row, "duration"),
        status=(row.get("status") or "").strip() or "Pass",
        line=line,
        cpu=cpu,
        memory_mb=mem,
    )


def write_generic_csv(jobs: Iterable[TraceJob], path: str | Path) -> None:
    """Write jobs in the generic format (used to convert traces and by the tests)."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["job_id", *GENERIC_COLUMNS])
        for j in jobs:
            w.writerow([j.job_id, j.submit, j.vc, j.user, j.gpus, j.duration, j.status])
