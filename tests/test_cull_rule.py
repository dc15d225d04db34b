"""The GPU cull rule, case by case: given a server's kernels, activity and GPU readings at a
time, expect keep, notice, withdraw or stop. A busy kernel or a working GPU is never culled."""

from __future__ import annotations

import itertools

import pytest

from labhive.hub_extension.cull_rule import (
    Action,
    Rule,
    ServerView,
    decide,
    gpu_idle_since,
)

RULE = Rule(gpu_idle_s=900, notice_s=60)
T0 = 1_000_000.0


def idle_gpu_server(**changes: object) -> ServerView:
    """A 1-GPU server whose kernels and GPU have been idle since T0."""
    base = dict(last_activity=T0, kernel_states=("idle",), gpus=1, gpu_read=True, gpu_idle_since=T0)
    return ServerView(**{**base, **changes})  # type: ignore[arg-type]


def test_idle_gpu_server_gets_a_notice_after_the_idle_time_then_is_stopped_after_the_notice():
    view = idle_gpu_server()
    assert decide(view, RULE, T0 + 899).action is Action.KEEP
    noticed = decide(view, RULE, T0 + 900)
    assert noticed.action is Action.NOTICE
    assert noticed.deadline == T0 + 960
    assert "culled" in noticed.why and "15 min" in noticed.why
    pending = idle_gpu_server(noticed_at=T0 + 900)
    assert decide(pending, RULE, T0 + 959).action is Action.KEEP
    stop = decide(pending, RULE, T0 + 960)
    assert stop.action is Action.STOP
    assert stop.idle_s == 960


@pytest.mark.parametrize("state", ["busy", "starting", "unknown"])
def test_a_kernel_that_is_not_idle_is_never_culled_however_long_the_gpu_idles(state):
    for states in (("idle", state), (state,), (state, state)):
        for noticed in (None, T0 + 900):
            view = idle_gpu_server(kernel_states=states, noticed_at=noticed)
            for later in (0, 900, 960, 10 * 86400):
                got = decide(view, RULE, T0 + later)
                assert got.action in (Action.KEEP, Action.WITHDRAW), (states, noticed, later)
                assert got.action is (Action.WITHDRAW if noticed else Action.KEEP)


def test_a_working_gpu_is_never_culled_even_with_idle_kernels_and_no_browser():
    for noticed, later in itertools.product((None, T0 + 900), (900, 960, 86400)):
        view = idle_gpu_server(gpu_idle_since=None, noticed_at=noticed, last_activity=None)
        got = decide(view, RULE, T0 + later)
        assert got.action is (Action.WITHDRAW if noticed else Action.KEEP)
        assert "working" in got.why


def test_a_gpu_that_worked_a_moment_ago_restarts_the_idle_clock():
    since = None
    for t, util in [(T0, 0), (T0 + 600, 0), (T0 + 601, 35), (T0 + 602, 0), (T0 + 1200, 0)]:
        since = gpu_idle_since(since, t, util)
    assert since == T0 + 602
    view = idle_gpu_server(gpu_idle_since=since)
    assert decide(view, RULE, T0 + 1200).action is Action.KEEP  # idle 598 s only
    assert decide(view, RULE, T0 + 602 + 900).action is Action.NOTICE


def test_activity_during_the_notice_withdraws_it_and_nothing_stops():
    view = idle_gpu_server(noticed_at=T0 + 900, last_activity=T0 + 930)  # the user came back
    got = decide(view, RULE, T0 + 960)
    assert got.action is Action.WITHDRAW


def test_a_cpu_only_server_is_left_to_the_idle_culler_timeout():
    view = idle_gpu_server(gpus=0)
    for later in (900, 7200, 86400):
        assert decide(view, RULE, T0 + later).action is Action.KEEP
    assert "jupyterhub-idle-culler" in decide(view, RULE, T0 + 7200).why


def test_a_gpu_share_counts_as_holding_a_gpu():
    assert decide(idle_gpu_server(gpus=0.25), RULE, T0 + 900).action is Action.NOTICE


def test_without_any_gpu_reading_nothing_is_culled():
    view = idle_gpu_server(gpu_read=False)
    assert decide(view, RULE, T0 + 86400).action is Action.KEEP


def test_recent_browser_activity_delays_the_notice():
    view = idle_gpu_server(last_activity=T0 + 500)
    assert decide(view, RULE, T0 + 1399).action is Action.KEEP
    assert decide(view, RULE, T0 + 1400).action is Action.NOTICE


def test_exhaustively_only_an_all_idle_gpu_server_past_its_time_is_ever_stopped():
    """Every combination of kernel states, GPU state, holdings, notices and times: STOP comes
    only where every kernel is idle, the GPU read 0 for the idle time and the notice ran out."""
    states = [(), ("idle",), ("busy",), ("idle", "busy"), ("idle", "idle")]
    for ks, gpus, read, gpu_since, act, noticed, later in itertools.product(
        states, (0, 0.5, 2), (True, False), (None, T0), (None, T0, T0 + 950),
        (None, T0 + 900), (0, 899, 900, 959, 960, 5000),
    ):  # fmt: skip
        view = ServerView(act, ks, gpus, read, gpu_since, noticed)
        got = decide(view, RULE, T0 + later)
        if got.action is Action.STOP:
            assert all(k == "idle" for k in ks) and gpus > 0 and read and gpu_since is not None
            assert noticed is not None and T0 + later >= noticed + RULE.notice_s
            assert (act or T0) <= noticed
        if got.action is Action.NOTICE:
            assert noticed is None and later >= 900 and gpus > 0 and read
        if noticed is None:
            assert got.action is not Action.WITHDRAW


def test_a_rule_with_no_idle_time_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="GPU idle time must be > 0"):
        Rule(gpu_idle_s=0)
