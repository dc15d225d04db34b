"""What the metrics need of each job, as columns in arrival order.

A million-job replay cannot keep a million ``SimJob`` objects (with their specs and records)
until the end only to average a few numbers over them: each job gets a row when it arrives
and its figures are written there when it is done (and, for jobs still waiting or running
when the run ends, then), so the simulator may forget the job itself. Eight numbers a job,
about 70 bytes. Rows stay in arrival order so sums over them add in the same order as over
the jobs, and give the same bits.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

#: The states a row records, by code (a job's ``state`` string).
STATES = ("PENDING", "WAITING", "RUNNING", "SUCCEEDED", "FAILED", "REJECTED", "STOPPED")
_CODE = {s: i for i, s in enumerate(STATES)}
_PENDING = _CODE["PENDING"]
_FLOATS = ("submit", "end", "first_start", "duration", "run_seconds", "gpu_seconds", "wasted")
NAN = float("nan")
#: Rows added to the columns at a time, blank (``JobTable._grow``).
CHUNK = 4096
_NANS = array("d", [NAN]) * CHUNK
_ZEROS = array("d", [0.0]) * CHUNK
#: A blank row's floats, by column in ``_FLOATS`` order (submit and duration: set by ``add``).
_BLANK = (_NANS, _NANS, _NANS, _NANS, _ZEROS, _ZEROS, _ZEROS)
_ZEROS_L = array("l", [0]) * CHUNK
_PENDINGS = array("b", [_PENDING]) * CHUNK
_ZEROS_H = array("h", [0]) * CHUNK


class JobTable:
    """One row per job: its times and GPU time as floats (NaN: not yet), preemptions, state
    and VC as small integers. Read them through ``arrays``, ``count`` and ``len``: the
    columns themselves hold blank rows past the last job (``add``)."""

    def __init__(self) -> None:
        self.columns: dict[str, array[float]] = {name: array("d") for name in _FLOATS}
        # The same columns in ``_FLOATS`` order, for ``add`` and ``fill`` (once per job each:
        # one unpacking, not seven look-ups by name).
        self._floats = tuple(self.columns.values())
        self.preemptions: array[int] = array("l")
        self.state = array("b")
        self.vc = array("h")
        self.vcs: list[str] = []  # VC names by code
        self._vc_code: dict[str, int] = {}
        self.user = array("l")  # the job's user, by code ("" for a job without one)
        self.users: list[str] = []  # user names by code
        self._user_code: dict[str, int] = {}
        # (VC, user) -> their two codes (``add``: one look-up a job, not two; a trace has a few
        # thousand pairs).
        self._codes: dict[tuple[str, str], tuple[int, int]] = {}
        # Rows in use; the columns hold ``_room`` rows, blank past ``_rows`` (``_grow``).
        self._rows = 0
        self._room = 0

    def __len__(self) -> int:
        return self._rows

    def add(self, job: Any) -> int:
        """A row for a job that just arrived, so not yet started, ended or preempted (its
        figures come with ``fill``, when it is done or the run ends); its index.

        The columns grow by ``CHUNK`` blank rows at a time (``_grow``): a row is then two
        numbers and a VC written, not ten appends (0.9 of a job's 15 us)."""
        row = self._rows
        if row == self._room:
            self._grow()
        self._rows = row + 1
        floats = self._floats
        floats[0][row] = job.submit
        floats[3][row] = job.duration
        codes = self._codes.get((job.vc, job.user))
        if codes is None:
            codes = self._new_codes(job.vc, job.user)
        self.vc[row], self.user[row] = codes
        return row

    def _new_codes(self, vc: str, user: str) -> tuple[int, int]:
        """The codes of a (VC, user) pair not seen before; a VC or user first seen is given
        the next code of its own (codes in order of first arrival, as the metrics sum in)."""
        vc_code = self._vc_code.get(vc)
        if vc_code is None:
            vc_code = self._vc_code[vc] = len(self.vcs)
            self.vcs.append(vc)
        user_code = self._user_code.get(user)
        if user_code is None:
            user_code = self._user_code[user] = len(self.users)
            self.users.append(user)
        codes = self._codes[vc, user] = (vc_code, user_code)
        return codes

    def _grow(self) -> None:
        """``CHUNK`` more rows, as ``add`` leaves a row until ``fill``: no end or first start
        yet (NaN), no time run, PENDING, no preemptions."""
        for col, blank in zip(self._floats, _BLANK, strict=True):
            col.extend(blank)
        self.preemptions.extend(_ZEROS_L)
        self.state.extend(_PENDINGS)
        self.vc.extend(_ZEROS_H)
        self.user.extend(_ZEROS_L)
        self._room += CHUNK

    def fill(self, row: int, job: Any) -> None:
        """The job's figures as they are now, into its row (its submit time and duration,
        which never change, ``add`` wrote)."""
        _, end, first_start, _, run_seconds, gpu_seconds, wasted = self._floats
        end[row] = NAN if job.end is None else job.end
        first_start[row] = NAN if job.first_start is None else job.first_start
        run_seconds[row] = job.run_seconds
        gpu_seconds[row] = job.gpu_seconds
        wasted[row] = job.wasted_gpu_seconds
        record = job.record  # (``SimJob.state`` and ``preemptions``, without two calls a job)
        self.preemptions[row] = 0 if record is None else record.preemptions
        self.state[row] = _PENDING if record is None else _CODE[record.state]

    def arrays(self) -> dict[str, np.ndarray]:
        """Every column as a numpy array, for the metrics."""
        n = self._rows  # (the blank rows past it are no jobs')
        out = {name: np.array(col[:n], dtype=np.float64) for name, col in self.columns.items()}
        out["preemptions"] = np.asarray(self.preemptions[:n], dtype=np.int64)
        out["state"] = np.asarray(self.state[:n], dtype=np.int8)
        out["vc"] = np.asarray(self.vc[:n], dtype=np.int16)
        out["user"] = np.asarray(self.user[:n], dtype=np.int64)
        return out

    def count(self, *states: str) -> int:
        return sum(self.state[: self._rows].count(_CODE[s]) for s in states)


def state_mask(states: np.ndarray, *names: str) -> np.ndarray:
    """Rows in any of the named states."""
    return np.isin(states, [_CODE[s] for s in names])
