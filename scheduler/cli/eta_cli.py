"""``labhive eta-report``: how close the service's ETAs came to the real starts, per VC.

Every waiting job's first estimate is stored and scored when it starts (service/eta.py); this
prints the median and p90 absolute error and the share of starts inside the p10-p90 range.
"""

from __future__ import annotations

import argparse
from typing import Any

from labhive.scheduler.cli.client_commands import _add, _client, _guard, _print_json, table


def register(subparsers: Any) -> None:
    p = _add(subparsers, "eta-report", "how accurate the ETAs were: error and range coverage")
    p.set_defaults(func=_eta_report)


@_guard
def _eta_report(args: argparse.Namespace) -> int:
    rows = _client(args)._get("/eta/accuracy")["vcs"]
    if args.json:
        _print_json(rows)
        return 0
    if not rows:
        print("no job has started after waiting yet: nothing to score")
        return 0
    print(table(("VC", "STARTS", "MEDIAN |ERROR|", "P90 |ERROR|", "IN P10-P90 RANGE"), [
        (r["vc"], r["starts"], _seconds(r["median_abs_error_s"]), _seconds(r["p90_abs_error_s"]),
         f"{100 * r['coverage']:.0f}%") for r in rows
    ]))  # fmt: skip
    return 0


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"
