"""A student's fair-share standing in a notebook, as papermill runs it: given ``labhive serve
--fair-share 7d`` on the virtual cluster, bob's job holding all of vc1's GPUs and one more of
his waiting, then alice's job waiting behind it, expect ``%queue vc1`` in a real kernel (plain
text, what papermill keeps) to tell alice her usage, her share of 1/2 among vc1's 2 users, that
she goes first and that her job is next in line; and bob's name nowhere in it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kernel_support import Kernel, Service, labhive_serve
from waiting import wait_until

from labhive.client import Client


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with labhive_serve(tmp_path_factory.mktemp("service"), "--fair-share", "7d") as svc:
        yield svc


def test_queue_in_a_notebook_shows_the_standing(service: Service) -> None:
    bob = Client(service.url, service.token("bob"))
    running = bob.submit(command="sleep 600", vc="vc1", gpus=4, name="hog")
    wait_until(lambda: running.refresh().state == "RUNNING", "bob's job to run", 60)
    later = bob.submit(command="true", vc="vc1", gpus=1, name="later")
    kernel = Kernel(service.env("alice"))
    try:
        assert kernel.run("%load_ext labhive.kernel_ext").error is None
        mine = kernel.run("job = %submit --vc vc1 --gpus 1 --no-wait -- true")
        assert mine.error is None, mine.stderr
        wait_until(lambda: later.refresh().queue_position == 2, "alice's job ahead of bob's", 30)
        out = kernel.run("%queue vc1")
        assert out.error is None, out.stderr
        (shown,) = out.texts()
        lines = shown.splitlines()
        assert lines[0] == "vc1: 4/4 guaranteed GPUs used, 0 opportunistic, 2 waiting", shown
        assert lines[1] == (
            "  fair share: you have used 0.0 GPU-h of vc1 (decayed: a GPU-hour counts half "
            "after 7d); your share is 1/2, rank 1 of 2; your next job is first in line"
        ), shown
        assert "bob" not in shown and "hog" not in shown
    finally:
        kernel.close()
        bob.cancel(later.id)
        bob.cancel(running.id)


def test_the_live_queue_widget_shows_the_standing_escaped() -> None:
    """The live ``%queue`` widget's HTML carries the standing under its VC, escaped."""
    from labhive.kernel_ext.facts import QueueFacts
    from labhive.kernel_ext.render import queue_html

    doc = {
        "vcs": {"vc1": {"guaranteed_gpus": 4, "used_gpus": 4, "waiting": 3}},
        "standing": {"vc1": {"text": "your share is 1/12 <b>"}},
    }
    html = queue_html(QueueFacts.from_api(doc), 0.0)
    assert '<div class="labhive-standing">fair share: your share is 1/12 &lt;b&gt;</div>' in html
    assert "labhive-standing" not in queue_html(QueueFacts.from_api({"vcs": doc["vcs"]}), 0.0)
