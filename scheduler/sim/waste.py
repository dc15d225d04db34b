"""The warning when preemption wastes GPU time, with advice that works.

A preempted run loses its work since its last checkpoint; without ``--checkpoint`` it loses
all of it. The old advice ("a longer las:quantum, or turn starvation promotion off") did not
work: promotion is off by default, and a longer quantum lets runs grow longer before they are
cut, so each preemption loses more (issue 34; measured on the synthetic Philly-format trace,
its first 3,000 jobs on the first 40 machines = 80 GPUs: default LAS wasted 23.4% without
checkpoints, 23.4% with ``quantum=900``, 20.0% with ``quantum=1800``, and 1.3% with
``--checkpoint 600``). So the advice names the knob that bounds the loss: the checkpoint
interval (or a policy that does not preempt), and promotion only where it is on.
"""

from __future__ import annotations

from typing import Any

from labhive.scheduler.sim.metrics import WASTE_WARNING
from labhive.scheduler.sim.runner import parse_policy

#: What the advice offers when the run had no checkpoints: each preemption then loses at
#: most this much of each of the job's GPUs' work.
SUGGESTED_CHECKPOINT = 600


def waste_warnings(runs: list[Any], checkpoint: float | None, restart_cost: float) -> list[str]:
    """A warning for each run that wasted more than ``WASTE_WARNING`` of its GPU time."""
    out = []
    for run in runs:
        share = run.summary["overall"].get("wasted_share") or 0.0
        if share > WASTE_WARNING:
            out.append(
                f"WARNING: {run.label} wasted {share:.1%} of its GPU time on preempted runs "
                f"(progress lost, restarts; warned above {WASTE_WARNING:.0%}): "
                + waste_advice(run.label, checkpoint, restart_cost)
            )
    return out


def waste_advice(policy: str, checkpoint: float | None, restart_cost: float) -> str:
    """What bounds the loss of this run's preemptions."""
    name, options = parse_policy(policy)
    if checkpoint is None:
        advice = [
            f"give --checkpoint SECONDS (a preempted job then loses at most that much work; "
            f"e.g. --checkpoint {SUGGESTED_CHECKPOINT}) or use a policy that does not preempt"
        ]
    else:
        advice = [
            f"a shorter --checkpoint than {checkpoint:g} s (each preemption loses up to that "
            "much of each GPU's work)"
        ]
    if restart_cost > 0:
        advice.append(f"a smaller --restart-cost than {restart_cost:g} s (paid on every restart)")
    if name == "las" and _number(options.get("promote_knob", "0")) > 0:
        advice.append("las:promote_knob=0 (promotion brings preempted jobs back to preempt others)")
    if name == "las" and checkpoint is None:
        advice.append("a longer las:quantum does not help: runs grow longer before they are cut")
    return "; ".join(advice)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0
