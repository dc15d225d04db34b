"""A timeline's VC is made when it is first read (``_VCs.__missing__``), so ``Timeline.run``
and ``wait`` read ``vcs[name]`` without a ``get`` and a test for None. Given random streams of
waits, starts and ends over VCs first seen at later instants (``test_timeline_integrals``'s),
expect every VC's served and asked-for GPU time and every global figure to the bit of the
plain timeline that makes each VC on a miss of ``get``; and given a VC first read at an instant,
expect it to start there, idle, and to be kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS
from test_timeline_integrals import Job, PlainTimeline, replay_changes

from labhive.scheduler.sim.timeline import Timeline


@pytest.mark.sources
@PROPERTY_SETTINGS
@given(seed=st.integers(0, 2**32 - 1), gpus=st.sampled_from([8, 64, 1024]))
def test_vcs_made_on_read_give_the_plain_timelines_integrals(seed: int, gpus: int) -> None:
    assert replay_changes(Timeline(gpus), seed) == replay_changes(PlainTimeline(gpus), seed)


def test_a_vc_first_read_late_starts_then_idle_and_is_kept() -> None:
    timeline = Timeline(16)
    timeline.advance(0.0)
    timeline.advance(40.0)
    timeline.run(Job("late", 4), 4)  # its first change, at 40 s
    vc = timeline.vcs["late"]
    assert (vc.last, vc.used, vc.served, vc.demand) == (40.0, 4, 0.0, 0.0)
    timeline.advance(50.0)
    timeline.wait(Job("late", 2), +1)
    assert timeline.vcs["late"] is vc and (vc.served, vc.demand) == (40.0, 40.0)
    assert list(timeline.vcs) == ["late"] and timeline.vcs.get("other") is None
