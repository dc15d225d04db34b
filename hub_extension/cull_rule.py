"""When an idle GPU server is culled: the rule alone, readings and times in, a decision out.

Pure (no I/O, no clocks): ``gpu_culler.py`` gathers what the hub, the notebook server and the
LabHive service say and asks ``decide``; the tests walk every case. The rule, in order:

1. A kernel that is ``busy`` (running a cell) keeps the server: it is never culled.
2. A GPU that works (utilisation above 0 in the latest reading, per process where NVML says,
   else per device) keeps the server: it is never culled.
3. A server that holds no GPU is left to ``jupyterhub-idle-culler`` (its long ``--timeout``);
   this rule only ever acts on servers holding a GPU or a GPU share.
4. Without a GPU reading (a virtual cluster, a driver that does not answer) nothing is known
   about the GPU, so nothing is culled by this rule either.
5. A GPU server idle (no kernel or browser activity, GPU at 0) for ``gpu_idle_s`` gets a notice;
   ``notice_s`` later, if it is still idle, it is stopped. Activity during the notice withdraws
   it (the decision says so, and the notice in the notebook disappears).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

#: Defaults of ``labhive up``: CPU-only servers after 2 h idle (jupyterhub-idle-culler), GPU
#: servers after 15 min of idle kernels and an idle GPU, each with 60 s of notice first.
CPU_TIMEOUT_S = 2 * 3600.0
GPU_IDLE_S = 15 * 60.0
NOTICE_S = 60.0


class Action(Enum):
    KEEP = "keep"  # nothing to do
    NOTICE = "notice"  # tell the notebook it will stop at ``deadline``
    WITHDRAW = "withdraw"  # it became busy during its notice: cancel the notice
    STOP = "stop"  # idle through its notice: stop it now


@dataclass(frozen=True, slots=True)
class ServerView:
    """One notebook server as the culler sees it at ``now``.

    ``last_activity``: the newest of the hub's and the server's activity (browser, kernels'
    messages). ``kernel_states``: each kernel's ``execution_state`` (``idle``, ``busy``,
    ``starting``...). ``gpus``: GPUs (or GPU shares) its job holds. ``gpu_idle_since``: since
    when every reading of its GPUs said 0 % (None: the latest said busy, or there is none).
    ``gpu_read``: whether any GPU reading exists. ``noticed_at``: when a notice went out."""

    last_activity: float | None
    kernel_states: tuple[str, ...] = ()
    gpus: float = 0.0
    gpu_read: bool = False
    gpu_idle_since: float | None = None
    noticed_at: float | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    gpu_idle_s: float = GPU_IDLE_S
    notice_s: float = NOTICE_S

    def __post_init__(self) -> None:
        if self.gpu_idle_s <= 0 or self.notice_s < 0:
            raise ValueError(
                f"the GPU idle time must be > 0 and the notice >= 0 seconds, got "
                f"{self.gpu_idle_s:g} and {self.notice_s:g}"
            )


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    why: str
    deadline: float | None = None  # NOTICE: when it will stop
    idle_s: float = 0.0  # how long it has been idle (STOP: the GPU time given back)


def idle_since(view: ServerView) -> float | None:
    """Since when the server has been idle in every respect, None when it is not idle."""
    if any(state != "idle" for state in view.kernel_states):
        return None
    if not view.gpu_read or view.gpu_idle_since is None:
        return None
    return max(view.gpu_idle_since, view.last_activity or view.gpu_idle_since)


def decide(view: ServerView, rule: Rule, now: float) -> Decision:
    """What to do with one server now (see the module docstring for the rule)."""
    pending = view.noticed_at is not None
    keep = Action.WITHDRAW if pending else Action.KEEP
    busy = [s for s in view.kernel_states if s != "idle"]
    if busy:
        return Decision(keep, f"a kernel is {busy[0]}: never culled")
    if view.gpus <= 0:
        return Decision(keep, "holds no GPU: left to jupyterhub-idle-culler's timeout")
    if not view.gpu_read:
        return Decision(keep, "no GPU reading: utilisation unknown, never culled")
    if view.gpu_idle_since is None:
        return Decision(keep, "its GPU is working: never culled")
    since = idle_since(view)
    assert since is not None
    idle = now - since
    if pending:
        assert view.noticed_at is not None
        if since > view.noticed_at:
            return Decision(Action.WITHDRAW, "active again since its notice")
        if now >= view.noticed_at + rule.notice_s:
            return Decision(Action.STOP, _idle_text(idle, view.gpus), idle_s=idle)
        return Decision(Action.KEEP, "notice given; waiting for its deadline")
    if idle >= rule.gpu_idle_s:
        deadline = now + rule.notice_s
        return Decision(Action.NOTICE, _idle_text(idle, view.gpus), deadline, idle)
    return Decision(Action.KEEP, f"idle for {idle:.0f} s of {rule.gpu_idle_s:.0f} s")


def gpu_idle_since(previous: float | None, reading_time: float, utilisation: float) -> float | None:
    """Fold one GPU reading into "idle since": a busy reading clears it, the first idle one
    after a busy one starts it, later idle ones keep it."""
    if utilisation > 0:
        return None
    return reading_time if previous is None else previous


def _idle_text(idle_s: float, gpus: float) -> str:
    minutes = idle_s / 60
    return f"culled: idle kernels and {gpus:g} GPU(s) at 0 % for {minutes:.0f} min"
