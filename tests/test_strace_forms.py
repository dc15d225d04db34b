"""One test per strace output form, each on lines strace really printed (the fixtures in
tests/data/strace were captured with strace 6.1 by capture.sh there; the inline lines are
copied from those fixtures and from the H100 logs)."""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from labhive.scheduler.observe.strace import parse_ff, parse_file, parse_lines
from labhive.scheduler.observe.strace_args import Fd, StraceString, parse_args, split_args
from labhive.scheduler.observe.strace_parse import iter_records
from labhive.scheduler.observe.strace_records import Call, Signal

FIXTURES = Path(__file__).resolve().parent / "data" / "strace"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "strace"


def one_call(line: str) -> Call:
    trace = parse_lines([line])
    assert trace.stats.unparsed == 0, trace.unparsed
    assert len(trace.calls) == 1
    return trace.calls[0]


def stamps(records: Sequence[Call | Signal]) -> list[float]:
    """The records' times, from a trace strace timestamped (-t, -tt, -ttt or -r): all have one."""
    times = [r.time for r in records if r.time is not None]
    assert len(times) == len(records), "a record without a time in a timestamped trace"
    return times


def test_plain_form() -> None:
    c = one_call('openat(AT_FDCWD, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3')
    assert (c.pid, c.time, c.name, c.retval, c.errno) == (None, None, "openat", 3, None)
    assert c.args == 'AT_FDCWD, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC'


def test_padded_return_column() -> None:
    c = one_call("brk(NULL)                               = 0x37372000")
    assert c.args == "NULL" and c.retval == 0x37372000 and c.ret == "0x37372000"


def test_f_pid_column_of_o_files() -> None:
    c = one_call("571   brk(NULL)                         = 0x3ddba000")
    assert c.pid == 571 and c.name == "brk"


def test_f_pid_prefix_on_stderr() -> None:
    c = one_call("[pid 25034] exit(0)                     = ?")
    assert c.pid == 25034 and c.retval is None and c.ret == "?"


def test_ff_files_take_the_pid_from_their_name() -> None:
    trace = parse_ff(FIXTURES / "ff" / "workload")
    pids = sorted(trace.timeline()["pid"])
    assert len(pids) == 5 and trace.stats.unparsed == 0
    killed = [e for e in trace.exits if e.signal == "SIGKILL"]
    assert len(killed) == 1 and killed[0].pid == pids[-1]
    assert parse_file(FIXTURES / "ff" / f"workload.{pids[0]}").calls[0].pid == pids[0]


def test_t_seconds_i_instruction_pointer_n_syscall_number_and_comm() -> None:
    trace = parse_file(FIXTURES / "t_i_n_comm.strace")
    assert trace.stats.unparsed == 0
    assert trace.stats.time_mode == "clock"
    first = trace.calls[0]
    assert first.name == "write" and first.pid is not None and first.time is not None
    assert len(trace.exits) == 5  # "[????????????????] +++ exited ..." lines too


def test_tt_microseconds() -> None:
    c = one_call("695   11:17:14.878818 wait4(696, 0x7ffddea1e998, WNOHANG, NULL) = 0")
    assert c.pid == 695 and c.time == pytest.approx(11 * 3600 + 17 * 60 + 14.878818)


def test_tt_past_midnight_keeps_time_increasing() -> None:
    trace = parse_lines(["1 23:59:59.900000 getpid() = 1", "1 00:00:00.100000 getpid() = 1"])
    t = stamps(trace.calls)
    assert t[1] - t[0] == pytest.approx(0.2)


def test_ttt_epoch_and_T_durations() -> None:
    trace = parse_file(FIXTURES / "ttt_yy_X_verbose.strace")
    assert trace.stats.time_mode == "epoch" and trace.stats.unparsed == 0
    c = one_call(
        "1795346229.467173 ioctl(9</dev/nvidiactl<char 195:255>>, 0xc04846d2 /* _IOC("
        "_IOC_READ|_IOC_WRITE, 0x46, 0xd2, 0x48) */, 0x7ffe2fd8f850) = 0 <0.000013>"
    )
    assert c.time == pytest.approx(1795346229.467173) and c.duration == pytest.approx(13e-6)


def test_r_relative_times_add_up() -> None:
    trace = parse_file(FIXTURES / "r.strace")
    assert trace.stats.time_mode == "relative"
    times = stamps(trace.calls)
    assert times == sorted(times) and times[0] == 0.0
    assert stamps(trace.signals)[0] > times[1]


def test_y_paths_on_arguments_and_returns() -> None:
    c = one_call(
        'openat(AT_FDCWD</tmp/labhive>, "/lib/x86_64-linux-gnu/libm.so.6", O_RDONLY|O_CLOEXEC)'
        " = 3</usr/lib/x86_64-linux-gnu/libm.so.6>"
    )
    assert c.retval == 3 and c.ret_path == "/usr/lib/x86_64-linux-gnu/libm.so.6"
    c = one_call("close(3</etc/ld.so.cache>)              = 0")
    assert c.fd == 3 and c.fd_path == "/etc/ld.so.cache"


def test_yy_device_numbers() -> None:
    c = one_call("ioctl(4</dev/pts/0<char 136:0>>, FIOCLEX) = 0")
    assert c.fd_path == "/dev/pts/0" and c.fd_path_decorated == "/dev/pts/0<char 136:0>"
    socket = one_call(
        "socketpair(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0, [5<UNIX-STREAM:[37215->37216]>, "
        "6<UNIX-STREAM:[37216->37215]>]) = 0"
    )
    pair = socket.parsed_args()[3]
    assert pair == [Fd(5, "UNIX-STREAM:[37215->37216]"), Fd(6, "UNIX-STREAM:[37216->37215]")]


def test_X_verbose_values_with_comments() -> None:
    c = one_call(
        '1795346229.453306 openat(-100 /* AT_FDCWD */</tmp/labhive>, "/etc/ld.so.cache", '
        "0x80000 /* O_RDONLY|O_CLOEXEC */) = 3</etc/ld.so.cache> <0.000013>"
    )
    assert c.fd == -100 and c.fd_path == "/tmp/labhive"
    assert c.parsed_args()[1:] == [StraceString(b"/etc/ld.so.cache"), 0x80000]


def test_unfinished_and_resumed_are_joined_per_pid() -> None:
    lines = [
        "24586 12:10:27.909119 madvise(0x7fd71b6f3000, 8368128, MADV_DONTNEED <unfinished ...>",
        "24586 12:10:27.909142 kill(24586, SIGUSR1 <unfinished ...>",
        "24589 12:10:27.909158 <... madvise resumed>) = 0 <0.000031>",
        "24586 12:10:27.909169 <... kill resumed>) = 0 <0.000020>",
    ]
    lines[0] = lines[0].replace("24586", "24589", 1)
    trace = parse_lines(lines)
    assert trace.stats.kinds == {"unfinished": 2, "resumed": 2}
    madvise, kill = trace.calls
    assert (madvise.pid, madvise.state, madvise.line, madvise.end_line) == (24589, "joined", 1, 3)
    assert madvise.args == "0x7fd71b6f3000, 8368128, MADV_DONTNEED" and madvise.retval == 0
    assert kill.args == "24586, SIGUSR1" and kill.duration == pytest.approx(20e-6)


def test_resumed_then_unfinished_again_and_a_call_cut_by_exit() -> None:
    trace = parse_file(
        FIXTURES.parent.parent.parent.parent / "shared/data/strace/ff/nvidia_smi_L.605"
    )
    poll = trace.calls[-1]
    assert poll.name == "poll" and poll.state == "complete" and poll.ret == "?"
    trace = parse_lines(
        [
            "659   poll([{fd=4, events=POLLIN}], 2, -1 <unfinished ...>",
            "659   +++ exited with 0 +++",
        ]
    )
    assert trace.calls[0].state == "unfinished" and trace.exits[0].code == 0


def test_orphan_resumed_line_is_kept() -> None:
    trace = parse_lines(["695   11:17:29.878893 <... kill resumed>) = 0"])
    assert trace.calls[0].state == "resumed" and trace.calls[0].args is None


def test_signals() -> None:
    trace = parse_file(FIXTURES / "f_tt_T_y.strace")
    names = [s.signal for s in trace.signals]
    assert names == ["SIGUSR1", "SIGCHLD"]
    assert "si_code=CLD_KILLED" in trace.signals[1].info
    stopped = parse_lines(["12 --- stopped by SIGSTOP ---"]).signals[0]
    assert (stopped.pid, stopped.signal, stopped.info) == (12, "SIGSTOP", "stopped")


def test_exits_and_kills() -> None:
    trace = parse_file(FIXTURES / "f_tt_T_y.strace")
    codes = {(e.code, e.signal) for e in trace.exits if e.code != 0}
    assert codes == {(3, None), (None, "SIGKILL")}
    segv = parse_file(FIXTURES / "segv.strace").exits[0]
    assert segv.signal == "SIGSEGV" and not segv.core_dumped
    core = parse_lines(["+++ killed by SIGSEGV (core dumped) +++"]).exits[0]
    assert core.signal == "SIGSEGV" and core.core_dumped


def test_question_mark_returns() -> None:
    c = one_call("24586 12:10:27.913933 exit_group(3)     = ?")
    assert c.retval is None and c.errno is None
    c = one_call(
        "12 read(0, 0x7ffd, 10) = ? ERESTARTSYS (To be restarted if SA_RESTART is set) <1.2>"
    )
    assert c.errno == "ERESTARTSYS" and c.note == "To be restarted if SA_RESTART is set"
    assert c.duration == pytest.approx(1.2)


def test_errno_with_its_text() -> None:
    c = one_call('access("/etc/ld.so.preload", R_OK)      = -1 ENOENT (No such file or directory)')
    assert (c.retval, c.errno, c.note) == (-1, "ENOENT", "No such file or directory")
    c = one_call("poll([{fd=4, events=POLLIN}], 1, 0) = 0 (Timeout)")
    assert c.retval == 0 and c.errno is None and c.note == "Timeout"


def test_strings_with_escapes_and_truncation() -> None:
    # the workload writes b'quote " tab \t newline \n bytes \x01\xff = ) = end\n'
    trace = parse_file(FIXTURES / "f_tt_T_y.strace")
    write = next(c for c in trace.calls if c.name == "write" and "quote" in (c.args or ""))
    s = write.parsed_args()[1]
    assert s == StraceString(b'quote " tab \t newline \n bytes \x01\xff = ) = end\n')
    assert write.retval == 43
    short = one_call('write(1, "quote \\" tab \\t ne"..., 43)   = 43').parsed_args()[1]
    assert short.truncated and short.value == b'quote " tab \t ne'
    hexed = parse_file(FIXTURES / "x_hex.strace").calls[0].parsed_args()[1]
    assert hexed.value.startswith(b"quote")


def test_equals_signs_inside_strings_do_not_split_the_return() -> None:
    c = one_call('write(1, "a) = 5 = b", 9) = 9')
    assert c.args == '1, "a) = 5 = b", 9' and c.retval == 9
    trace = parse_lines(
        ['1 write(1, "x) = 3"..., 9 <unfinished ...>', "1 <... write resumed>) = 9"]
    )
    assert trace.calls[0].state == "joined" and trace.calls[0].retval == 9


def test_nested_structures_and_arrays() -> None:
    c = one_call(
        "ioctl(4, TCGETS, {c_iflag=ICRNL|IXON, c_oflag=NL0|CR0|OPOST|ONLCR, c_cflag=B38400|CS8|"
        "CREAD, c_lflag=ISIG|ICANON, c_line=N_TTY, c_cc=[[VINTR]=0x3, [VQUIT]=0x1c, [17]=0, "
        "[18]=0]}) = 0"
    )
    termios = c.parsed_args()[2]
    assert termios["c_iflag"] == "ICRNL|IXON" and termios["c_cc"]["VINTR"] == 3
    assert termios["c_cc"]["18"] == 0
    stat = one_call("fstat(3, {st_mode=S_IFREG|0644, st_size=33715, ...}) = 0").parsed_args()[1]
    assert stat == {"st_mode": "S_IFREG|0644", "st_size": 33715, "...": ...}
    polled = one_call(
        "poll([{fd=4, events=POLLIN}, {fd=5, events=POLLIN}], 2, -1) = 1 ([{fd=4, revents=POLLIN}])"
    )
    assert polled.parsed_args()[0] == [{"fd": 4, "events": "POLLIN"}, {"fd": 5, "events": "POLLIN"}]
    assert polled.note == "[{fd=4, revents=POLLIN}]"
    clone = one_call(
        "clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD, child_tidptr=0x7f) = 696"
    )
    assert clone.parsed_args() == [
        {"child_stack": None},
        {"flags": "CLONE_CHILD_CLEARTID|SIGCHLD"},
        {"child_tidptr": 0x7F},
    ]
    assert split_args('a, {b, c}, [d, e], f(g, h), "i, j", k') == [
        "a",
        "{b, c}",
        "[d, e]",
        "f(g, h)",
        '"i, j"',
        "k",
    ]
    assert parse_args("~[RTMIN RT_1], [HUP INT]") == ["~[RTMIN RT_1]", ["HUP", "INT"]]


def test_c_table() -> None:
    trace = parse_file(FIXTURES / "c.summary")
    assert trace.stats.kinds == {"table": trace.stats.total}
    table = trace.summary_table().set_index("syscall")
    rows = table.drop(index="total")
    assert table.loc["total", "calls"] == rows["calls"].sum()
    assert table.loc["total", "errors"] == rows["errors"].sum()


def test_c_w_wall_clock_table() -> None:
    table = parse_file(FIXTURES / "c_w.summary").summary_table()
    assert table.iloc[-1]["syscall"] == "total" and table["seconds"].notna().all()


def test_C_trace_then_table() -> None:
    trace = parse_file(FIXTURES / "C.strace")
    assert trace.stats.unparsed == 0
    assert {"call", "table"} <= set(trace.stats.kinds)
    table = trace.summary_table().set_index("syscall")
    assert table.loc["kill", "calls"] == sum(c.name == "kill" for c in trace.calls)


def test_k_stack_frames() -> None:
    trace = parse_file(FIXTURES / "k.strace")
    write = trace.calls[0]
    assert write.stack and write.stack[0].startswith("/usr/lib/x86_64-linux-gnu/libc.so.6(")
    frames = sum(len(c.stack or []) for c in trace.calls)
    frames += sum(len(s.stack or []) for s in trace.signals)
    assert (
        trace.stats.kinds["stack"] == frames == trace.stats.total - 7
    )  # 4 calls, 2 signals, 1 exit
    assert all(s.stack for s in trace.signals)  # a signal's frames are its own
    # streaming: a record is yielded only once its frames are attached
    with (FIXTURES / "k.strace").open() as fh:
        at_yield = [len(r.stack or []) for r in iter_records(fh) if isinstance(r, Call)]
    assert at_yield == [len(c.stack or []) for c in trace.calls] and min(at_yield) > 0


def test_stderr_form_lines_cut_by_attach_messages() -> None:
    trace = parse_file(FIXTURES / "stderr_form.strace")
    assert trace.stats.unparsed == 0
    assert [m.event for m in trace.messages] == ["attached"] * 4
    clones = [c for c in trace.calls if c.name in ("clone", "clone3")]
    assert len(clones) == 4 and all(c.retval and c.retval > 0 for c in clones)
    cut = next(c for c in clones if c.name == "clone")
    assert cut.args is not None
    assert cut.args.endswith("child_tidptr=0x7f9cc951c310") and "strace:" not in cut.args
    # the last lines have no pid column again: wait4 still joins its pid's half
    wait4 = next(c for c in trace.calls if c.name == "wait4")
    assert wait4.state == "joined" and wait4.pid is not None


def test_e_write_data_dumps_belong_to_their_call() -> None:
    trace = parse_file(FIXTURES / "write_dump.strace")
    assert trace.stats.kinds == {"call": 1, "dump": 1, "exit": 1}
    assert trace.calls[0].data == ["00000  68 65 6c 6c 6f 0a" + " " * 33 + "hello.           |"]


def test_execve_by_a_thread_supersedes_the_leader() -> None:
    trace = parse_file(FIXTURES / "superseded.strace")
    assert trace.stats.unparsed == 0
    leader = trace.calls[0].pid
    execve = [c for c in trace.calls if c.name == "execve"][1]
    # "<pid changed to ...>", then "+++ superseded ...", then the leader's "<... execve resumed>"
    assert execve.state == "joined" and execve.retval == 0
    assert execve.args is not None and execve.args.endswith("vars */")
    superseded = trace.exits[0]
    assert superseded.pid == leader and superseded.execve_by is not None
    assert superseded.code is None and superseded.signal is None


def test_detached_calls() -> None:
    line = (
        "pselect6(251, [250], NULL, NULL, {tv_sec=599, tv_nsec=974582992}, {sigmask=[CHLD], "
        "sigsetsize=8} <detached ...>"
    )
    call = parse_lines([line, "System call usage summary for 32 bit mode:"]).calls[0]
    assert (call.name, call.state, call.note) == ("pselect6", "unfinished", "detached")
    assert call.args is not None and call.args.endswith("sigsetsize=8}")


def test_odd_prefixes_fall_back_without_crashing() -> None:
    trace = parse_lines(["  getpid() = 1", " [ 12] getpid() = 1", "x y getpid() = 1", "(a) = 1"])
    assert trace.stats.total == 4 == trace.stats.parsed + trace.stats.unparsed
    assert trace.calls[0].name == "getpid"


def test_unknown_lines_are_kept_with_their_number() -> None:
    trace = parse_lines(["getpid() = 7", "hello from the program", "", "getpid() = 7"])
    assert trace.stats.total == 4 and trace.stats.parsed == 3 and trace.stats.unparsed == 1
    assert (trace.unparsed[0].line, trace.unparsed[0].text) == (2, "hello from the program")


def test_gzip_and_stdin(tmp_path: Path) -> None:
    raw = (FIXTURES / "f_tt_T_y.strace").read_bytes()
    gz = tmp_path / "log.strace.gz"
    gz.write_bytes(gzip.compress(raw))
    assert len(parse_file(gz).calls) == len(parse_file(FIXTURES / "f_tt_T_y.strace").calls)
    code = (
        "import sys; from labhive.scheduler.observe.strace import parse_file\n"
        "t = parse_file('-'); print(t.stats.total, len(t.calls))"
    )
    out = subprocess.run([sys.executable, "-c", code], input=raw, capture_output=True, check=True)
    assert out.stdout.split() == [
        str(raw.count(b"\n")).encode(),
        str(len(parse_file(gz).calls)).encode(),
    ]


def test_streaming_iterable_of_lines() -> None:
    text = (FIXTURES / "r.strace").read_text()
    assert parse_lines(io.StringIO(text)).stats.total == text.count("\n")
