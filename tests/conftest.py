"""Hypothesis profiles: the suite is repeatable by default, exploring is a deliberate act.

``repeatable`` (the default) derives examples from each test's name, so a green main stays green
on the next CI run; ``explore`` (``HYPOTHESIS_PROFILE=explore make test``) draws fresh random
examples, many more of them (tests that ask for more than the default keep their
ratio), and is how new counterexamples get found (add them as explicit
``@example``s when they show a bug)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
from hypothesis import settings

from labhive.scheduler import native

# No deadline: CI shares 2 cores, and a slow example is not a wrong one (speed has benchmarks).
settings.register_profile(
    "repeatable", derandomize=True, database=None, deadline=None, print_blob=True
)
settings.register_profile("explore", max_examples=2000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

# Services the suite starts run tasks as the service's own user, as before issue 15: this
# machine's Python lives under /root (0700), which the per-user uids a root service would switch
# to cannot execute, and most of the suite's jobs run Python. The isolation tests
# (tests/test_isolation_*.py) ask for per-user identities explicitly, with commands every uid
# can run.
os.environ.setdefault("LABHIVE_TASK_IDENTITY", "service")


# The host's registry of uid ranges (scheduler/service/uid_claims.py) is /var/lib/labhive's: a
# test's services claim theirs in a registry of the test's own instead, so that neither other
# test runs on this machine nor earlier tests' data dirs (pytest keeps them) hold their ranges.
_SESSION_STATE = tempfile.mkdtemp(prefix="labhive-state-")
atexit.register(shutil.rmtree, _SESSION_STATE, True)
os.environ.setdefault("LABHIVE_STATE_DIR", _SESSION_STATE)


@pytest.fixture(autouse=True)
def _own_uid_registry(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    monkeypatch.setenv("LABHIVE_STATE_DIR", str(tmp_path_factory.mktemp("uid-registry")))


# White-box tests (marked ``sources``) patch or spy on the internals of a compiled module: an
# instance's method replaced, a module global monkeypatched that compiled callers never re-read,
# a class subclassed to watch its calls. Against the compiled modules they test nothing (or fail),
# so they skip here, and ``make test`` runs them again with LABHIVE_PURE=1 (``-m sources``).
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not native.install().compiled:
        return
    skip = pytest.mark.skip(
        reason="white-box (sources): runs in the `LABHIVE_PURE=1 pytest -m sources` pass"
    )
    for item in items:
        if item.get_closest_marker("sources") is not None:
            item.add_marker(skip)
