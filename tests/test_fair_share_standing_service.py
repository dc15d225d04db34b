"""Fair-share standing through the live service (real HTTP, real processes), as a course would
meet it: given a VC of 2 GPUs with ``fairShare``, bob's two jobs hold both GPUs and five more
of his wait, then dave queues two. Expect ``GET /me/standing``, ``GET /queue`` and
``labhive queue`` to tell bob he has used GPU time, that his share is 1/2, that he is second of
2 in rank and that dave's 2 jobs (less usage) are ahead of his, and to tell dave his next job is
first in line. Expect nobody but an admin to learn another user's standing: bob asking for
dave's is refused, and ``/metrics`` carries per-user usage only for an admin's scrape."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_fixtures import BOB, DAVE, course_cluster, course_users, live_service
from waiting import job_in, wait_until

from labhive.scheduler.cli import main as client_main
from labhive.scheduler.client import LabHiveError

USERS = course_users("course")
CLUSTER = course_cluster("7d", "other: {virtualCells: [{cellType: POOL.VNODE, cellNumber: 1}]}")


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """bob runs 2 one-GPU jobs (both of course's GPUs) and queues 5; then dave queues 2."""
    tmp = tmp_path_factory.mktemp("standing")
    cluster = tmp / "cluster.yaml"
    cluster.write_text(CLUSTER)
    with live_service(tmp / "data", users=USERS, cluster=str(cluster)) as live:
        bob = live.client(BOB)
        running = [bob.submit(command="sleep 600", vc="course", gpus=1) for _ in range(2)]
        for job in running:
            wait_until(job_in(job, "RUNNING"), "bob's jobs to run", 120)
        # usage is shown in GPU-hours to 4 places (0.36 s of a GPU) as of the last pass: let
        # bob's 2 GPUs run a second first, so the passes below show some (a pass right at
        # their start showed 0.0, and the test read it on a fast machine)
        time.sleep(1.0)
        began = time.time()
        waiting = [bob.submit(command="true", vc="course", gpus=1) for _ in range(5)]
        dave = [live.client(DAVE).submit(command="true", vc="course", gpus=1) for _ in range(2)]
        wait_until(lambda: dave[-1].refresh().queue_position is not None, "dave's job queued")
        yield live, began, waiting, dave


def test_bob_sees_his_usage_share_rank_and_the_quieter_jobs_ahead(course: Any) -> None:
    live, began, waiting, _ = course
    before = time.time()
    mine = live.client(BOB).standing()
    assert mine["fair_share"] and mine["user"] == "bob"
    assert set(mine["vcs"]) == {"course"}  # the VCs bob's groups grant
    bob = mine["vcs"]["course"]
    elapsed_h = (time.time() - began + 60) / 3600  # (his jobs started before ``began``)
    assert 0 < bob["usage_gpu_hours"] <= 2 * elapsed_h
    assert (bob["running_gpus"], bob["users"], bob["rank"], bob["share_of_vc"]) == (2, 2, 2, 0.5)
    assert (bob["waiting"], bob["position"], bob["ahead"], bob["ahead_less_used"]) == (5, 3, 2, 2)
    assert bob["half_life_s"] == 7 * 86400
    assert "your share is 1/2, rank 2 of 2" in bob["text"]
    assert "2 jobs of users with less usage are ahead of yours" in bob["text"]
    # the place shown is the place his first waiting job has in the queue
    assert min(j.refresh().queue_position for j in waiting) == bob["position"]
    assert time.time() - before < 30


def test_dave_is_first_in_line_and_queue_and_cli_say_the_same(course: Any, capsys: Any) -> None:
    live, _, _, dave_jobs = course
    dave = live.client(DAVE).standing()["vcs"]["course"]
    assert (dave["usage_gpu_hours"], dave["rank"], dave["position"], dave["ahead"]) == (0, 1, 1, 0)
    assert "your next job is first in line" in dave["text"]
    queue = live.client(DAVE).queue()
    assert queue["standing"]["course"]["text"] == dave["text"]
    assert dave_jobs[0].refresh().queue_position == 1
    code = client_main(["queue", "--url", live.url, "--token", BOB])
    out = capsys.readouterr().out
    assert code == 0
    assert "Your fair-share standing:" in out
    assert "course: you have used" in out and "rank 2 of 2" in out
    assert "2 jobs of users with less usage are ahead of yours" in out


def test_bob_cannot_read_daves_standing_nor_learn_his_name(course: Any) -> None:
    """The attack: bob asks for dave's standing by name, and looks for dave in his own."""
    live = course[0]
    with pytest.raises(LabHiveError) as refused:
        live.client(BOB).standing(user="dave")
    assert "only an admin may see another user's standing" in str(refused.value)
    seen = (
        httpx.get(f"{live.url}/me/standing", headers={"Authorization": f"Bearer {BOB}"}).text
        + httpx.get(f"{live.url}/queue", headers={"Authorization": f"Bearer {BOB}"}).text
    )
    assert "dave" not in seen
    # an admin may ask (the hub's spawn page does, with its service token)
    assert live.client().standing(user="dave")["vcs"]["course"]["position"] == 1


def usage_series(text: str) -> dict[tuple[str, str], float]:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    family = families.get("labhive_fair_share_usage_gpu_hours")
    return {} if family is None else {
        (s.labels["vc"], s.labels["user"]): s.value for s in family.samples
    }  # fmt: skip


def test_per_user_usage_on_metrics_is_for_admins_only(course: Any) -> None:
    """The attack: an anonymous scrape, and bob's token, ask /metrics for who used how much."""
    live = course[0]
    anonymous = httpx.get(f"{live.url}/metrics").text
    as_bob = httpx.get(f"{live.url}/metrics", headers={"Authorization": f"Bearer {BOB}"}).text
    forged = httpx.get(f"{live.url}/metrics", headers={"Authorization": "Bearer not-a-token"})
    for text in (anonymous, as_bob, forged.text):
        assert usage_series(text) == {}
        assert "labhive_fair_share_share" not in text
    assert forged.status_code == 200  # still the public page
    headers = {"Authorization": f"Bearer {live.admin}"}
    admin = httpx.get(f"{live.url}/metrics", headers=headers).text
    usage = usage_series(admin)
    assert usage[("course", "bob")] > 0 and usage[("course", "dave")] == 0
    families = {f.name: f for f in text_string_to_metric_families(admin)}
    shares = {(s.labels["vc"], s.labels["user"]): s.value
              for s in families["labhive_fair_share_share"].samples}  # fmt: skip
    assert shares == {("course", "bob"): 0.5, ("course", "dave"): 0.5}
    assert "labhive_jobs" in families  # the rest of the page is there too


def test_the_queue_reads_the_policy_once_per_pass_yet_shows_each_change(course: Any) -> None:
    """Twenty ``GET /queue`` with the loop idle read the policy's state at most twice (once,
    and once more if ``MAX_AGE_S`` ran out); a job submitted after them shows in the next, with
    its place, and is gone from the one after its cancel."""
    live, *_ = course
    views = live.running.service.pass_views
    loop = live.running.service.loop
    client = live.client(DAVE)
    waiting = client.queue()["vcs"]["course"]["waiting"]
    passes, computed = loop.passes, views.computed
    for _ in range(20):
        client.queue()
    if loop.passes == passes:  # (nothing else made the loop pass meanwhile)
        assert views.computed - computed <= 2
    extra = client.submit(command="true", vc="course", gpus=1)
    wait_until(lambda: extra.refresh().queue_position is not None, "the new job queued")
    page = client.queue()
    assert page["vcs"]["course"]["waiting"] == waiting + 1
    rows = {e["id"]: e for e in page["waiting"]}
    assert rows[extra.id]["position"] == 3  # (after dave's two: his own)
    assert client.standing()["vcs"]["course"]["waiting"] == 3
    extra.cancel()
    wait_until(lambda: extra.refresh().state == "STOPPED", "the cancel")
    page = client.queue()
    assert extra.id not in {e["id"] for e in page["waiting"]}
    assert page["vcs"]["course"]["waiting"] == waiting
