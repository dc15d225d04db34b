"""Property tests: whatever text arrives, the parser neither crashes nor loses a line."""

from __future__ import annotations

import contextlib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labhive.scheduler.observe.ioctl import decode
from labhive.scheduler.observe.strace import parse_lines
from labhive.scheduler.observe.strace_args import parse_args, to_jsonable

FIXTURES = Path(__file__).resolve().parent / "data" / "strace"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "strace"
REAL_LINES = [
    line
    for path in [
        *sorted(FIXTURES.glob("*.strace")),
        *sorted(FIXTURES.glob("*.summary")),
        SHARED / "nvidia_smi.strace",
        SHARED / "nvidia_smi_L_ttt_X_verbose.strace",
        SHARED / "local_tty_socket_ioctls_v.strace",
    ]
    for line in path.read_text(errors="surrogateescape").splitlines()
]
# characters strace output is made of, so that mutations reach deep into the parser
CHARS = '()[]{}<>"\\=,.:|/ *-+?0123456789abcdefxyzEPIDT_\t'
PIECES = st.sampled_from([*CHARS, "...", " = ", "<unfinished ...>", "<... ", " resumed>", "---"])


def check(lines: list[str], frames: bool = False) -> None:
    trace = parse_lines(lines)
    st_ = trace.stats
    assert st_.total == len(lines) == st_.parsed + st_.unparsed
    assert len(trace.unparsed) == st_.unparsed
    for call in trace.calls:
        to_jsonable(call.parsed_args())
        _ = (call.fd, call.fd_path, call.ret_path)
    trace.summary()
    if frames:
        trace.calls_df()
        trace.timeline()


FAST = settings(
    max_examples=settings().max_examples * 3 // 2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@FAST
@given(st.lists(st.text(max_size=120), max_size=12))
def test_arbitrary_text_never_crashes(lines: list[str]) -> None:
    check([line.replace("\n", " ").replace("\r", " ") for line in lines])


@FAST
@given(st.lists(st.binary(max_size=100), max_size=8))
def test_arbitrary_bytes_never_crash(chunks: list[bytes]) -> None:
    text = b"\n".join(chunks).decode("utf-8", errors="surrogateescape")
    check(text.split("\n"))


@FAST
@given(
    st.lists(
        st.tuples(
            st.sampled_from(REAL_LINES),
            st.integers(min_value=0, max_value=400),
            st.integers(min_value=0, max_value=30),
            st.lists(PIECES, max_size=6).map("".join),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_mutated_real_lines_never_crash(edits: list[tuple[str, int, int, str]]) -> None:
    """Take real lines, cut a piece out and splice strace-like characters in."""
    lines = []
    for line, at, cut, insert in edits:
        at = min(at, len(line))
        lines.append(line[:at] + insert + line[at + cut :])
    check(lines)


PREFIXES = st.lists(
    st.sampled_from(
        [
            "",
            " ",
            "  ",
            "571 ",
            "[pid  12] ",
            "12<comm> ",
            "11:17:14.877061 ",
            "0.000010 ",
            "1795346229.453172 ",
            "[ 257] ",
            "[00007f6b] ",
            "[????????] ",
            "x ",
            "[pid ",
            "12:",
        ]
    ),
    max_size=4,
).map("".join)


@FAST
@given(st.lists(st.tuples(PREFIXES, st.sampled_from(REAL_LINES)), min_size=1, max_size=10))
def test_real_bodies_behind_any_prefix_never_crash(pairs: list[tuple[str, str]]) -> None:
    check([prefix + line for prefix, line in pairs])


@FAST
@given(st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=30))
def test_real_lines_in_any_order_are_all_read(lines: list[str]) -> None:
    """Shuffled real lines (resumed before unfinished, tables cut in half) still all count."""
    check(lines)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=30))
def test_frames_of_any_real_lines(lines: list[str]) -> None:
    check(lines, frames=True)


@FAST
@given(st.text(max_size=80))
def test_decoder_only_ever_raises_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        decode(text, "/dev/nvidiactl")


@FAST
@given(
    st.integers(min_value=0, max_value=2**32 - 1),
    st.sampled_from(
        [
            None,
            "/dev/nvidiactl",
            "/dev/nvidia0",
            "/dev/nvidia-uvm",
            "/dev/kfd",
            "/dev/pts/0",
            "socket",
        ]
    ),
)
def test_any_number_decodes_and_round_trips(number: int, device: str | None) -> None:
    r = decode(number, device)
    assert r.number == number
    assert r.direction is not None and r.nr is not None and r.type is not None
    assert 0 <= r.nr < 256 and 0 <= r.type < 256
    assert r.size is not None and r.size < 2**14


@FAST
@given(st.text(alphabet=CHARS, max_size=80))
def test_argument_parser_never_crashes(text: str) -> None:
    to_jsonable(parse_args(text))


def test_an_hour_with_a_leading_zero_digit_parses() -> None:
    """Found by the fuzzer: a clock time whose hour has three digits once crashed the parser."""
    line = "25025 012:10:35.150744 gettid()          = 25025 <0.000011>"
    check([line])
    (call,) = parse_lines([line]).calls
    assert call.name == "gettid" and call.time == 12 * 3600 + 10 * 60 + 35.150744
