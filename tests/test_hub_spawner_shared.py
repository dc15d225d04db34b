"""The spawners of one hub share one connection pool to the LabHive service, and its form is
a template that escapes what it shows.

Given the real service (token auth: alice and bob are two students with their own tokens) and
spawners of both in one hub process, expect: one pool for all of them; each request to carry
its own user's token however the users' requests interleave (the service answers ``/me`` with
the caller's name); no cookie one user got to ride on another user's request; a spawner that
stops never closing the pool under another spawner's request in flight; the pool closed once
no spawner holds it. And a VC or job name with ``<script>`` in it shown as text on the form.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from service_fixtures import Live, live_service

from labhive.hub_extension import shared_client
from labhive.hub_extension.spawner import LabHiveSpawner
from labhive.scheduler.client import Client

ALICE, BOB = "alice-token-123", "bob-token-4567"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_service(tmp_path_factory.mktemp("svc") / "data") as service:
        yield service


def spawner_of(url: str, name: str, token: str, tmp: Path, **traits: Any) -> LabHiveSpawner:
    from jupyterhub.objects import Hub

    user = SimpleNamespace(name=name, escaped_name=name, url=f"/user/{name}/", id=1, settings={})
    return LabHiveSpawner(
        user=user,
        hub=Hub(ip="127.0.0.1", port=1, base_url="/hub/"),
        api_token=token,
        service_url=url,
        secrets_dir=str(tmp / "secrets"),
        **traits,
    )


def pools_of(url: str) -> list[shared_client.SharedPool]:
    return [p for p in shared_client.open_pools() if p.key[0].startswith(url)]


def test_two_users_interleaved_requests_each_carry_their_own_token(
    live: Live, tmp_path: Path
) -> None:
    """Given alice's and bob's spawners in one hub, 40 requests each sent at once (threads,
    as the spawners send them), expect one pool between them and the service to see alice's
    token on each of alice's requests and bob's on each of bob's."""
    alice = spawner_of(live.url, "alice", ALICE, tmp_path)
    bob = spawner_of(live.url, "bob", BOB, tmp_path)

    async def interleaved() -> list[tuple[str, str]]:
        async def who(spawner: LabHiveSpawner) -> tuple[str, str]:
            me = await spawner._call(lambda c: c.me(), token=spawner.api_token)
            return str(spawner.user.name), str(me["name"])

        asks = [who(s) for _ in range(40) for s in (alice, bob)]
        return await asyncio.gather(*asks)

    try:
        answers = asyncio.run(interleaved())
        assert len(pools_of(live.url)) == 1
        assert alice._client(ALICE)._http is bob._client(BOB)._http, "one pool, not two"
        wrong = [(asked, seen) for asked, seen in answers if asked != seen]
        assert wrong == [], f"the service saw another user's token: {wrong[:5]}"
        assert len(answers) == 80
    finally:
        asyncio.run(alice.stop(now=True))
        asyncio.run(bob.stop(now=True))


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers each request with a session cookie named after its token, and records each
    request's Authorization and Cookie headers."""

    seen: ClassVar[list[tuple[str, str, str]]] = []

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.seen.append((self.path, auth, self.headers.get("Cookie", "")))
        body = b"{}"
        self.send_response(200)
        self.send_header("Set-Cookie", f"session={auth.split()[-1] if auth else 'none'}; Path=/")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def test_a_cookie_one_user_got_never_rides_on_another_users_request(tmp_path: Path) -> None:
    """Given a service (a plain HTTP server here) that sets a session cookie in its answer
    to alice, expect bob's next request through the shared pool to carry no cookie and only
    bob's token; nor alice's own next request (the pool keeps no cookies at all)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    alice = shared_client.TokenClient(url, ALICE)
    bob = shared_client.TokenClient(url, BOB)
    try:
        assert alice._http is bob._http
        alice._get("/from-alice")
        bob._get("/from-bob")
        alice._get("/from-alice-again")
    finally:
        alice.close()
        bob.close()
        server.shutdown()
    assert _Recorder.seen == [
        ("/api/v1/from-alice", f"Bearer {ALICE}", ""),
        ("/api/v1/from-bob", f"Bearer {BOB}", ""),
        ("/api/v1/from-alice-again", f"Bearer {ALICE}", ""),
    ]
    assert pools_of(url) == [], "the last client's close closes the pool"


def test_a_spawner_that_stops_does_not_close_the_pool_under_anothers_request(
    live: Live, tmp_path: Path
) -> None:
    """Given alice's server job that takes ~2 s to die (it ignores SIGTERM: the service's
    grace, then SIGKILL) and alice's spawner cancelling it with ``wait`` (a request in flight
    for those 2 s), expect bob's spawner to stop meanwhile (giving back its hold on the pool)
    without breaking alice's request: it returns the job STOPPED. Once alice's spawner stops
    too, the pool is closed, and a new spawner gets a new one that works."""
    job = live.client(ALICE).submit(
        name="stubborn", command="trap '' TERM; sleep 60", vc="vc1", gpus=0, cpu=0.1
    )
    _wait(lambda: live.client().job(job.id).state == "RUNNING", "alice's job to run")
    alice = spawner_of(live.url, "alice", ALICE, tmp_path)
    bob = spawner_of(live.url, "bob", BOB, tmp_path)

    async def scenario() -> str:
        await bob._call(lambda c: c.me(), token=BOB)  # bob's spawner holds the pool too
        cancel = asyncio.ensure_future(
            alice._call(lambda c: c.cancel(job.id, wait=20).state, token=ALICE)
        )
        pool = pools_of(live.url)[0]
        while pool.in_flight == 0:
            await asyncio.sleep(0.01)
        await bob.stop(now=True)  # gives its leases back while alice's request is in flight
        assert not cancel.done(), "the cancel returned before its job died: no test"
        assert not pool.closed
        return str(await cancel)

    try:
        assert asyncio.run(scenario()) == "STOPPED"
    finally:
        asyncio.run(alice.stop(now=True))
    assert pools_of(live.url) == [], "no spawner holds the pool: it is closed"
    again = spawner_of(live.url, "bob", BOB, tmp_path)
    try:
        assert asyncio.run(again._call(lambda c: c.me(), token=BOB))["name"] == "bob"
        assert len(pools_of(live.url)) == 1
    finally:
        asyncio.run(again.stop(now=True))


def test_a_dropped_client_gives_its_lease_back_and_a_closed_pool_is_refused(live: Live) -> None:
    """A client dropped without close (its spawner collected) gives its lease back, so the
    pool does not outlive its users; a client used after the pool closed says so instead of
    sending through a closed pool."""
    kept = shared_client.TokenClient(live.url, ALICE)
    dropped: Client | None = shared_client.TokenClient(live.url, BOB)
    pool = pools_of(live.url)[0]
    assert pool.leases == 2
    dropped = None  # noqa: F841  (the last reference: CPython collects it now)
    assert pool.leases == 1
    assert kept.me()["name"] == "alice"
    kept.close()
    assert pool.closed
    with pytest.raises(RuntimeError, match=r"pool of this client is closed.*make a new client"):
        kept.me()


def test_a_spawner_stopped_while_its_own_request_is_handed_to_a_thread_still_gets_its_answer(
    live: Live, tmp_path: Path
) -> None:
    """The hub may stop a server (closing its spawner's clients) while that spawner's
    progress has just handed a request to a worker thread that has not sent it yet. Given
    alice's spawner alone on the pool and a request held at the thread's door, expect the
    stop not to close the pool under it: the request, let go, gets alice's answer; the pool
    closes after it."""
    alice = spawner_of(live.url, "alice", ALICE, tmp_path)
    door = threading.Event()

    def me_after_the_door(client: Client) -> str:
        assert door.wait(10), "the door was never opened"
        return str(client.me()["name"])

    async def scenario() -> str:
        asked = asyncio.ensure_future(alice._call(me_after_the_door, token=ALICE))
        await asyncio.sleep(0.2)  # the call is in its thread, at the door
        await alice.stop(now=True)  # no job: it only gives the spawner's leases back
        assert len(pools_of(live.url)) == 1, "the pool closed under a request handed off"
        door.set()
        return await asyncio.wait_for(asked, 10)

    assert asyncio.run(scenario()) == "alice"
    assert pools_of(live.url) == [], "nobody holds the pool after the request: it is closed"


def test_a_vc_or_job_name_with_a_script_tag_is_shown_as_text_on_the_form(
    live: Live, tmp_path: Path
) -> None:
    """Given a grants file that grants a VC named ``<script>...`` and a last server whose
    notice quotes a job name with ``<script>`` in it, expect the packaged form to show both
    as text (escaped), never as markup."""
    attack = "<script>alert('x')</script>"
    grants = tmp_path / "grants.yaml"
    grants.write_text(f'groups:\n  students: {{vcs: [vc1, "{attack}"]}}\n')
    spawner = spawner_of(live.url, "alice", ALICE, tmp_path, grants_file=str(grants))
    spawner.user = SimpleNamespace(
        **{**vars(spawner.user), "groups": [SimpleNamespace(name="students")]}
    )
    spawner.load_state({"labhive_last_end": f"Your server (job {attack}) was cancelled."})
    try:
        form = asyncio.run(spawner._options_form())
    finally:
        asyncio.run(spawner.stop(now=True))
    assert "<script>" not in form, form
    escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
    assert f"<option value='{escaped}' selected>{escaped} (your VC)</option>" in form, form
    assert f"Your server (job {escaped}) was cancelled." in form, form


def _wait(done: Any, what: str, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
