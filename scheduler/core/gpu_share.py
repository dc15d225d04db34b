"""GPU shares: a task that needs less than one GPU asks for a half, a quarter or an eighth.

A share is held in thousandths of a GPU (``milli``, as the Alibaba trace's ``gpu_milli`` and
``sim/openb.py``): exact integer sums, so "the shares on one GPU never exceed 1" is
``sum(milli) <= 1000`` with no rounding. Only the power-of-two fractions 1/2, 1/4 and 1/8 are
accepted, because

- they pack without waste: whatever mix of them a GPU holds, what is left of it is a whole number
  of eighths, so a GPU is never left with a sliver no share fits (0.3 + 0.3 + 0.3 would strand a
  tenth of a GPU forever);
- they map onto what enforcement can split: CUDA MPS's active-thread percentage (50/25/12) and an
  even split of the GPU's memory;
- a class reasons about "a quarter of a GPU" more easily than about 0.37 of one.

A share is for one task that needs less than one GPU: ``--gpus 1.5`` (or a share with several
tasks) is refused with what works instead. This module is pure: parsing and arithmetic only.
"""

from __future__ import annotations

from argparse import ArgumentTypeError
from fractions import Fraction
from typing import Protocol

#: A whole GPU in thousandths.
MILLI = 1000
#: The shares a task may ask for, in thousandths of a GPU: 1/2, 1/4, 1/8.
SHARES_MILLI = (500, 250, 125)
#: How the accepted shares are written in messages and docs.
SHARES_SHOWN = "0.5, 0.25 or 0.125 (1/2, 1/4, 1/8)"


class ShareError(ValueError):
    """A GPU count that is neither a whole number nor an accepted share; says what works (a
    value that is no number at all says only what it got: ``jobs._gpus`` says the rest)."""


def parse_gpus(value: object) -> tuple[int, int]:
    """``(gpus, share_milli)`` from a job's ``gpus``: a whole number (``share_milli`` 0), or a
    share of one GPU (``gpus`` 1, ``share_milli`` 500, 250 or 125). Accepts numbers and the
    strings "0.25" and "1/4"; ``bool`` is no number."""
    if isinstance(value, bool):
        raise ShareError(f"got {value!r}")
    if isinstance(value, int):
        return value, 0
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ShareError(f"got {value!r}")
        amount = Fraction(value).limit_denominator(1000)
    elif isinstance(value, str):
        try:
            amount = Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            raise ShareError(f"got {value!r}") from None
    else:
        raise ShareError(f"got {type(value).__name__}")
    if amount.denominator == 1:
        return int(amount), 0
    if amount > 1:
        raise ShareError(
            f"{_show(amount)} GPUs: a share is only for a single task needing less than one GPU; "
            f"ask for whole GPUs ({int(amount)} or {int(amount) + 1}) or for a share "
            f"{SHARES_SHOWN}"
        )
    milli = amount * MILLI
    if amount < 0 or milli.denominator != 1 or int(milli) not in SHARES_MILLI:
        raise ShareError(
            f"{_show(amount)} is not a GPU share LabHive places; use {SHARES_SHOWN}, "
            "which pack a GPU without waste, or a whole number of GPUs"
        )
    return 1, int(milli)


def _show(amount: Fraction) -> str:
    return f"{float(amount):g}"


def as_number(value: object) -> int | float:
    """A GPU count as a job's ``gpus`` takes it: whole GPUs as an int, a share (0.25, "1/4")
    as its fraction; a ``ShareError`` for anything else."""
    gpus, share = parse_gpus(value)
    return share / MILLI if share else gpus


def gpus_arg(text: str) -> int | float:
    """``--gpus`` on a command line: a whole number, or a share (0.25, 1/4) as the number a
    job's ``gpus`` takes; argparse shows a ``ValueError``'s text as the option's error."""
    try:
        return as_number(text)
    except ShareError as err:
        detail = str(err)
        if detail.startswith("got "):
            detail = f"not a number of GPUs ({detail}); use 1, 2, ... or a share {SHARES_SHOWN}"
        raise ArgumentTypeError(detail) from None


def share_of_doc(doc: object) -> int:
    """The share (thousandths) a stored job document asks for: the short form's ``gpus`` or a
    one-role OpenPAI job's ``resourcePerInstance.gpu``; 0 for whole GPUs or anything else (the
    document passed intake, so a share in it is a valid one)."""
    if not isinstance(doc, dict):
        return 0
    value = doc.get("gpus")
    roles = doc.get("taskRoles")
    if isinstance(roles, dict) and len(roles) == 1:
        (role,) = roles.values()
        res = role.get("resourcePerInstance") if isinstance(role, dict) else None
        value = res.get("gpu") if isinstance(res, dict) else None
    if value is None or isinstance(value, int):
        return 0
    try:
        return parse_gpus(value)[1]
    except ShareError:
        return 0


def shares_refused(policy: str, share_milli: int) -> str:
    """Why a queue policy (fifo, sjf, drf, capacity, las) refuses a share: it counts GPUs in
    whole slots, so it could only round the share up to a GPU, silently; says what works."""
    return (
        f"policy {policy} places whole GPUs only and cannot place a share of one "
        f"({share_milli / MILLI:g} GPU): it would hold a whole GPU. Ask for --gpus 1 (a whole "
        "GPU), or run the scheduler with --policy hived, which packs shares onto one GPU"
    )


def show_gpu_use(index: int | str, shares: list[float]) -> str:
    """A shared GPU as people read it: "GPU 0: 0.5 used by 2 jobs"."""
    jobs = "1 job" if len(shares) == 1 else f"{len(shares)} jobs"
    return f"GPU {index}: {sum(shares):g} used by {jobs}"


class Shared(Protocol):
    """What ``held_gpus`` reads of a job (``jobs.JobSpec``; not imported: jobs imports this)."""

    @property
    def share_milli(self) -> int: ...


def held_gpus(spec: Shared | None, gpus: int) -> float:
    """What a running job holds of GPUs (its ``gpus`` GPU slots): a share's fraction, else
    ``gpus`` (reclaimed GPU-hours count a culled quarter as a quarter)."""
    share = spec.share_milli if spec is not None else 0
    return share / MILLI if share else gpus


def fraction(share_milli: int) -> float:
    """A share as a fraction of a GPU (1.0 for a whole GPU, ``share_milli`` 0)."""
    return share_milli / MILLI if share_milli else 1.0


def show_gpus(gpus: int, share_milli: int) -> str:
    """A task's GPUs as people read them: "0.25 GPU", "1 GPU", "2 GPUs", "no GPU"."""
    if share_milli:
        return f"{share_milli / MILLI:g} GPU"
    if gpus == 0:
        return "no GPU"
    return f"{gpus} GPU" if gpus == 1 else f"{gpus} GPUs"
