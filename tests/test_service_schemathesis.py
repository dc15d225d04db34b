"""Given the service's own OpenAPI document, expect schemathesis' generated requests (valid and
invalid, a bounded number per operation) to get no 5xx.

The fuzzing user belongs to a group that grants no VC, so every generated job is parsed and
checked against the cluster (where bad input bites) but refused before it is stored: no
generated command ever runs on this machine.
"""

from __future__ import annotations

from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err, Ok

pytest_plugins = ["service_fixtures"]

FUZZ_TOKEN = "fuzz-token-0000"
FUZZ_USERS = f"""
users:
  fuzz: {{token: {FUZZ_TOKEN}, groups: [nobody]}}
groups:
  nobody: {{vcs: []}}
"""


def test_no_request_gets_a_5xx(tmp_path: Path) -> None:
    from service_fixtures import live_service

    with live_service(tmp_path / "data", users=FUZZ_USERS) as live:
        schema = schemathesis.openapi.from_url(live.url + "/openapi.json")
        results = list(schema.get_all_operations())
        assert not [r.err() for r in results if isinstance(r, Err)], "the schema has bad operations"
        operations = [r.ok() for r in results if isinstance(r, Ok)]
        assert len(operations) >= 13
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=20,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
                database=None,
            )
            def fuzz(case: schemathesis.Case) -> None:
                case.call_and_validate(
                    headers={"Authorization": f"Bearer {FUZZ_TOKEN}"},
                    checks=[not_a_server_error],
                )

            fuzz()
