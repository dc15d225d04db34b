"""HiveD's algorithm (``labhive.scheduler.hived.core``) as a policy the drivers can pick by name.

Options (``--policy hived:fair_share=7d,reserve_after=1h``) set the cluster config's
``fairShare`` for this run, so ``labhive simulate`` can compare HiveD with and without fair
share on one machine list (which has no ``fairShare`` of its own): ``fair_share`` is the
half-life (``off`` drops a config's fair share), ``reserve_after`` the wait after which a job
holds its VC and priority (``never``, the default: no reservation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from labhive.scheduler.core.config import ClusterConfig, FairShare
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.hived.admission import Admission, reject_if_never_runs
from labhive.scheduler.hived.core import HivedScheduler

OPTIONS = ("fair_share", "reserve_after")


def create(config: ClusterConfig, **options: Any) -> HivedScheduler:
    """The HiveD scheduler for ``config``, with fair share as ``options`` say."""
    return HivedScheduler(with_options(config, options))


def admission(config: ClusterConfig, **options: Any) -> Callable[[JobSpec], None]:
    """HiveD's check of a submission, without a scheduler: what ``HivedScheduler.check`` asks,
    of the same numbers of ``config`` (``hived.admission``)."""
    return partial(reject_if_never_runs, Admission.of(with_options(config, options)))


def with_options(config: ClusterConfig, options: dict[str, Any]) -> ClusterConfig:
    """``config`` with the fair share the options ask for (unchanged without options)."""
    if not options:
        return config
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UserError(
            f"policy hived takes fair_share=HALF_LIFE (e.g. 7d, or off) and "
            f"reserve_after=DURATION (or never), got {', '.join(unknown)}"
        )
    fair = config.fair_share
    half_life = options.get("fair_share")
    if half_life is not None and str(half_life).strip().lower() == "off":
        return replace(config, fair_share=None)
    if half_life is not None:
        seconds = _seconds("fair_share", half_life)
    elif fair is not None:
        seconds = fair.half_life
    else:
        raise UserError("policy hived: reserve_after needs fair_share=HALF_LIFE (e.g. 7d)")
    shares = fair.shares if fair is not None else {}
    reserve = fair.reserve_after if fair is not None else None
    if "reserve_after" in options:
        text = str(options["reserve_after"]).strip().lower()
        reserve = None if text == "never" else _seconds("reserve_after", options["reserve_after"])
    return replace(config, fair_share=FairShare(seconds, reserve, shares))


def _seconds(name: str, value: Any) -> float:
    from labhive.scheduler.core.time_limits import parse_time_limit

    try:
        return parse_time_limit(value)
    except ValueError as err:
        raise UserError(f"policy hived: {name} {err}") from None
