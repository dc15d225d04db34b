"""Given NVML readings of a node over time, expect the scheduler to hear NodeDown with the
reason when a GPU is lost, reports a critical XID or a double-bit ECC error, and NodeUp once
the readings are clean again."""

from __future__ import annotations

from dataclasses import replace

from metrics_world import h100_sample

from labhive.scheduler.core.model import NodeDown, NodeUp
from labhive.scheduler.observe.health import NodeHealth, health


def at(sample, t):
    return replace(sample, time=t)


def test_healthy_node_stays_quiet() -> None:
    events, state = health("n1", h100_sample())
    assert events == [] and state == NodeHealth(xid_until=0.0)


def test_lost_gpu_takes_the_node_down_and_up_again() -> None:
    lost = at(h100_sample(lost=True), 10.0)
    events, state = health("n1", lost)
    (down,) = events
    assert isinstance(down, NodeDown), events
    assert down == NodeDown("n1", 10.0, down.reason)
    assert "GPU 0 is lost" in down.reason
    events, state = health("n1", at(lost, 20.0), state)
    assert events == []  # still down: no repeated events
    events, state = health("n1", at(h100_sample(), 30.0), state)
    assert events == [NodeUp("n1", 30.0)] and state.reason == ""


def test_double_bit_ecc_names_the_gpu_and_the_count() -> None:
    ecc = {
        "corrected_volatile": 9,
        "uncorrected_volatile": 2,
        "corrected_aggregate": 9,
        "uncorrected_aggregate": 2,
    }
    (down,), _ = health("n1", h100_sample(ecc_errors=ecc))
    assert isinstance(down, NodeDown)
    assert "GPU 0 (GPU-e7c046e5-9dbd-ca41-9060-91d5a385b88f)" in down.reason
    assert "2 uncorrectable (double-bit) ECC" in down.reason


def test_single_bit_ecc_alone_is_not_a_fault() -> None:
    ecc = {
        "corrected_volatile": 50,
        "uncorrected_volatile": 0,
        "corrected_aggregate": 50,
        "uncorrected_aggregate": 0,
    }
    events, _ = health("n1", h100_sample(ecc_errors=ecc))
    assert events == []


def test_critical_xid_holds_the_node_down_then_releases_it() -> None:
    first = at(h100_sample(xid_events=[79]), 100.0)
    (down,), state = health("n1", first, hold_s=60)
    assert isinstance(down, NodeDown) and "XID 79" in down.reason
    quiet = replace(first, gpus=tuple(replace(g, new_xids=()) for g in first.gpus))
    events, state = health("n1", at(quiet, 150.0), state, hold_s=60)
    assert events == [] and state.reason  # within the hold
    events, state = health("n1", at(quiet, 161.0), state, hold_s=60)
    assert events == [NodeUp("n1", 161.0)]


def test_application_xid_is_the_job_s_problem() -> None:
    """XID 13 (graphics engine exception) and 31 (MMU fault) come from user code."""
    events, _ = health("n1", h100_sample(xid_events=[13, 31]))
    assert events == []


def test_unreadable_machine_is_down() -> None:
    sample = replace(h100_sample(), gpus=(), error="nvmlDeviceGetCount: Unknown Error")
    (down,), _ = health("n1", sample)
    assert isinstance(down, NodeDown) and "NVML cannot read the GPUs" in down.reason
