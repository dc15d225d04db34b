"""Given the real strace logs in ../shared/data/strace, expect the parser to yield exactly the
records (every field, in order) and line counts that it yielded when the fingerprints in
tests/data/strace_golden.json were taken (before ``iter_records`` was split into small
readers). A refactoring of the parser that changes one record of one log fails here.

Regenerate only for an intended change of output:
``python tests/test_strace_golden.py --write`` (and say why in the commit)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from labhive.scheduler.observe.strace_parse import LineStats, iter_records, open_log

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "strace"
GOLDEN = Path(__file__).with_name("data") / "strace_golden.json"


def _logs() -> list[Path]:
    """The logs test_strace_real_logs.py reads."""
    return sorted(
        p
        for p in DATA.glob("**/*")
        if p.is_file() and (".strace" in p.name or p.suffix == ".summary" or p.parent.name == "ff")
    )


def _golden() -> dict[str, dict[str, object]]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}


def fingerprint(path: Path) -> dict[str, object]:
    """The records' reprs hashed in order, their count, and the line stats of one log."""
    stats = LineStats()
    digest = hashlib.sha256()
    count = 0
    with open_log(path) as lines:  # .gz logs are decompressed
        for rec in iter_records(lines, stats=stats):
            digest.update(repr(rec).encode())
            digest.update(b"\n")
            count += 1
    return {
        "records": count,
        "sha256": digest.hexdigest(),
        "stats": [stats.total, stats.parsed, stats.unparsed, stats.kinds, stats.time_mode],
    }


def _name(path: Path) -> str:
    return str(path.relative_to(DATA))


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data/strace is not checked out")
def test_every_real_log_has_a_fingerprint() -> None:
    assert sorted(_golden()) == [_name(p) for p in _logs()]


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data/strace is not checked out")
@pytest.mark.parametrize("name", sorted(_golden()))
def test_records_of_a_real_log_are_unchanged(name: str) -> None:
    want = _golden()[name]
    assert json.loads(json.dumps(fingerprint(DATA / name))) == want


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(
        json.dumps({_name(p): fingerprint(p) for p in _logs()}, indent=1, sort_keys=True) + "\n"
    )
