"""Given hostile or careless input, expect every `labhive` command to answer with a message and
exit 2 (never a traceback, a hang or gigabytes of memory), tables that cannot drive the
terminal, a quiet end when the reader of a pipe goes away, and truncated .gz logs parsed up to
the cut. Each test is one finding of issue 16 (item 5)."""

from __future__ import annotations

import gzip
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from labhive.scheduler.cli import main, scenario_cli
from labhive.scheduler.cli.client_commands import table
from labhive.scheduler.core.config import MAX_LEAF_CELLS, ConfigError, load_cluster_config
from labhive.scheduler.core.terminal import visible
from labhive.scheduler.core.yamlines import (
    MAX_YAML_CHARS,
    MAX_YAML_DEPTH,
    MAX_YAML_VALUES,
    YamlLimitError,
    YamlSyntaxError,
    load_yaml,
)

pytest_plugins = ["service_fixtures"]

BUG = "internal error"  # what the last-resort handler says; no known input may reach it

NODE_CLUSTER = """\
physicalCluster:
  cellTypes:
    NODE: {{childCellType: GPU, childCellNumber: {gpus}, isNodeLevel: true}}
  physicalCells:
    - {{cellType: NODE, cellAddress: n0}}
virtualClusters:
  default: {{virtualCells: [{{cellType: NODE.GPU, cellNumber: 1}}]}}
"""


def alias_bomb(width: int, levels: int) -> str:
    """A flow list of ``levels`` lists, each ``width`` aliases of the one before: about
    width**levels values once expanded, a few hundred bytes of text."""
    items = ["&a0 [" + ", ".join(["lol"] * width) + "]"]
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def validate(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    code = main(["validate", str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


def write(tmp_path: Path, text: str, name: str = "input.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def bounded_labhive(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI in a process of at most 2 GiB, so a regression fails instead of swapping."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    return subprocess.run(
        [sys.executable, "-m", "labhive.scheduler.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        preexec_fn=limit,
    )


# ---- YAML: size, depth, aliases, keys, scalars ------------------------------------------------


def test_an_alias_bomb_is_refused_naming_the_limit() -> None:
    with pytest.raises(YamlLimitError, match=f"more than {MAX_YAML_VALUES:,} values"):
        load_yaml("x: " + alias_bomb(10, 6))  # 1,111,111 values once expanded


def test_aliases_below_the_limit_still_load() -> None:
    data = load_yaml(f"x: {alias_bomb(10, 3)}\nbase: &b {{x: 1}}\nuse: {{<<: *b, y: 2}}\n")
    assert len(data["x"][2]) == 10 and data["use"] == {"x": 1, "y": 2}


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a\n  b: *a\n"])
def test_an_alias_inside_itself_is_refused(text: str) -> None:
    with pytest.raises(YamlLimitError, match="line 1: an alias refers to a value that contains it"):
        load_yaml(text)


def test_deep_nesting_is_refused_naming_the_limit() -> None:
    with pytest.raises(YamlLimitError, match=f"nested more than {MAX_YAML_DEPTH} levels"):
        load_yaml("x: " + "[" * 5000 + "]" * 5000)
    assert load_yaml("x: " + "[" * 20 + "]" * 20)["x"] == [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]


def test_a_huge_document_is_refused_unread() -> None:
    with pytest.raises(YamlLimitError, match=f"at most {MAX_YAML_CHARS:,} characters"):
        load_yaml("# padding\n" * (MAX_YAML_CHARS // 10 + 1), origin="big.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("? [a, b]\n: 1\n", "line 1: a key must be a plain value such as a name or a number"),
        ("{{a: 1}: 2}\n", "a key must be a plain value"),
        ("? !!set {a, b}\n", "a key must be a plain value"),
        ("x: 2020-13-45\n", "line 1: not a valid value: month must be in 1..12"),
        ("x: !!int 0x\n", "line 1: not a valid value"),
        ("x: !!float abc\n", "line 1: not a valid value"),
        ("x: " + "9" * 5000 + "\n", "line 1: not a valid value"),
    ],
)
def test_keys_and_scalars_python_cannot_hold_are_refused_with_the_line(text, message) -> None:
    with pytest.raises(YamlSyntaxError, match=message.replace("[", r"\[")):
        load_yaml(text)


def test_unhashable_keys_in_a_cluster_config_are_a_message(tmp_path, capsys) -> None:
    path = write(tmp_path, "physicalCluster:\n  cellTypes:\n    ? [a, b]\n    : {}\n")
    code, _, err = validate(capsys, path)
    assert code == 2 and "line 3: a key must be a plain value" in err and BUG not in err


# ---- cluster configs --------------------------------------------------------------------------


def test_a_wrapper_whose_config_is_not_a_mapping_is_a_message(tmp_path, capsys) -> None:
    code, _, err = validate(capsys, write(tmp_path, 'hivedscheduler: {config: "-1"}\n'))
    assert code == 2 and BUG not in err
    assert "line 1: hivedscheduler.config: must hold a HiveD config (a mapping)" in err


def test_a_cluster_of_a_hundred_million_gpus_is_refused_before_building_it() -> None:
    with pytest.raises(ConfigError, match=f"at most {MAX_LEAF_CELLS:,} GPU cells") as err:
        load_cluster_config(NODE_CLUSTER.format(gpus=100_000_000))
    assert "line 5: physicalCluster.physicalCells[0].cellType" in str(err.value)
    assert "100,000,000 GPU cells" in str(err.value)


def test_the_leaf_cell_bound_counts_every_top_cell_and_every_level() -> None:
    text = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 1000, isNodeLevel: true}
    RACK: {childCellType: NODE, childCellNumber: 600}
  physicalCells:
    - {cellType: RACK}
    - {cellType: RACK}
virtualClusters:
  default: {virtualCells: [{cellType: RACK, cellNumber: 1}]}
"""
    with pytest.raises(ConfigError, match=r"physicalCells\[1\].cellType: .* 1,200,000 GPU cells"):
        load_cluster_config(text)


def test_a_chain_of_cell_types_deeper_than_the_bound_is_refused() -> None:
    types = "".join(
        f"    T{i}: {{childCellType: T{i + 1}, childCellNumber: 1}}\n" for i in range(40)
    )
    text = (
        "physicalCluster:\n  cellTypes:\n"
        + types
        + "    T40: {childCellType: GPU, childCellNumber: 1, isNodeLevel: true}\n"
        + "  physicalCells: [{cellType: T0}]\nvirtualClusters: {default: {}}\n"
    )
    with pytest.raises(ConfigError, match="more than 32 cell types on the way down to a GPU"):
        load_cluster_config(text)


def test_a_list_as_a_physical_cells_type_is_a_message() -> None:
    text = NODE_CLUSTER.format(gpus=2).replace("{cellType: NODE,", "{cellType: [NODE],")
    with pytest.raises(ConfigError, match=r"physicalCells\[0\].cellType: unknown cell type"):
        load_cluster_config(text)


# ---- scenarios --------------------------------------------------------------------------------

SUBMIT = "events:\n  - {at: 0, submit: {name: a, vc: default, tasks: 1, gpus: 1, duration: 5}}\n"


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        ("expect:\n  - {at: 0, job: [a], state: RUNNING}\n", "expect[0].job: no job named"),
        ("expect:\n  - {at: 0, job: a, state: [RUNNING]}\n", "expect[0].state: must be one of"),
        ("expect:\n  - {at: .nan, job: a, state: RUNNING}\n", "expect[0].at: a time in seconds"),
        ("  - {at: .inf, finish: a}\n", "events[1].at: must be a time in seconds >= 0, got inf"),
        ('  - {at: 1, submit: {spec: "a\\0b.yaml"}}\n', "spec: a file name has no NUL character"),
    ],
)
def test_scenario_mistakes_are_messages_with_the_line(tmp_path, capsys, tail, message) -> None:
    path = write(tmp_path, SUBMIT + tail, "scenario.yaml")
    for command in ("validate", "replay"):
        code = main([command, str(path)])
        err = capsys.readouterr().err
        assert code == 2 and message in err and BUG not in err, err


def test_a_nul_in_a_cluster_path_is_shown_escaped(tmp_path, capsys) -> None:
    path = write(tmp_path, 'cluster: "c\\0.yaml"\n' + SUBMIT, "scenario.yaml")
    code, _, err = validate(capsys, path)
    assert code == 2 and "no cluster config at" in err and "c\\x00.yaml" in err and "\0" not in err


def test_a_file_that_is_not_utf8_is_a_message_for_every_reader(tmp_path, capsys) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    scenario = write(tmp_path, "cluster: binary.yaml\n" + SUBMIT, "scenario.yaml")
    for argv, what in [
        (["validate", str(binary)], "file"),
        (["replay", str(binary)], "scenario"),
        (["validate", str(scenario)], "cluster config"),
        (["submit", str(binary), "--url", "http://127.0.0.1:9"], "job file"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{what} {binary} is not UTF-8 text (byte 6: 0xff); save it as UTF-8" in err


def test_a_nul_in_a_command_line_path_is_a_message(capsys) -> None:
    for argv, message in [
        (["validate", "a\0b"], "no file at 'a\\x00b': a file name has no NUL character"),
        (["replay", "a\0b"], "no scenario at 'a\\x00b'"),
        (["strace", "parse", "a\0b"], "no strace log at 'a\\x00b'"),
    ]:
        assert main(argv) == 2
        assert message in capsys.readouterr().err


# ---- the command line itself ------------------------------------------------------------------


def test_an_unexpected_exception_is_one_line_saying_it_is_a_bug(monkeypatch, capsys) -> None:
    def broken(args: object) -> int:
        return len(visible(None))  # type: ignore[arg-type]  # fails inside re, called by us

    monkeypatch.setattr(scenario_cli, "run_validate", broken)
    assert main(["validate", "x.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "labhive validate: internal error (a bug in LabHive" in err
    assert "TypeError: expected string or bytes-like object" in err
    assert re.search(r" at terminal\.py:\d+$", err.rstrip())  # our innermost frame, not re's


def test_the_real_cli_refuses_bombs_and_giant_clusters_quickly_in_bounded_memory(tmp_path) -> None:
    # today's code printed the value in its error message: 9**9 strings, gigabytes
    bomb = write(tmp_path, f"physicalCluster: {{skuTypes: {{s: {{gpu: {alias_bomb(9, 9)}}}}}}}\n")
    giant = write(tmp_path, NODE_CLUSTER.format(gpus=100_000_000), "giant.yaml")
    for path, message in [(bomb, "aliases (*name) expand"), (giant, "GPU cells")]:
        proc = bounded_labhive("validate", str(path), cwd=tmp_path)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr


def test_a_closed_pipe_ends_the_command_quietly(tmp_path) -> None:
    events = "".join(
        f"  - {{at: {i}, submit: {{name: j{i}, tasks: 1, gpus: 1, duration: 1000}}}}\n"
        for i in range(60)
    )
    scenario = write(tmp_path, "events:\n" + events, "many.yaml")
    err = tmp_path / "stderr.txt"
    cli = f"{sys.executable} -m labhive.scheduler.cli"
    proc = subprocess.run(
        f"{cli} replay --json {scenario} 2>{err} | head -c 100; exit ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert len(proc.stdout) == 100
    assert err.read_text() == "" and proc.returncode == 141  # as if SIGPIPE had ended it


# ---- tables -----------------------------------------------------------------------------------


def test_control_characters_in_table_cells_are_shown_as_escapes() -> None:
    text = table(("NAME", "WHY"), [("\x1b[2Jevil", "a\rb\x9b31m\u202etxt"), (None, "ok")])
    assert "\x1b" not in text and "\r" not in text and "\x9b" not in text
    assert "\\x1b[2Jevil" in text and "a\\rb\\x9b31m\\u202etxt" in text
    assert visible("line one\nline\ttwo", keep_newlines=True) == "line one\nline\\ttwo"


def test_a_job_name_with_escape_codes_never_reaches_the_terminal_raw(live_sqlite, capsys) -> None:
    """Whether the service stores such a name or refuses it, nothing printed carries an ESC."""
    base = ["--url", live_sqlite.url, "--token", live_sqlite.admin]
    submitted = main(["submit", *base, "--vc", "vc1", "--name", "x\x1b[2Jy", "--", "true"])
    assert submitted in (0, 2) and BUG not in capsys.readouterr().err  # the submitter's own text
    for command in (["jobs"], ["queue"], ["show", "1"]):
        code = main([command[0], *base, *command[1:]])
        out = capsys.readouterr()
        assert code in (0, 2) and "\x1b" not in out.out + out.err
        if submitted == 0 and command == ["jobs"]:
            assert "x\\x1b[2Jy" in out.out


def test_replay_and_validate_show_escape_codes_in_job_names(tmp_path, capsys) -> None:
    """Whether job parsing accepts such names or refuses them, nothing printed carries them raw."""
    events = '  - {at: 0, submit: {name: "a\\e[2Jb", tasks: 1, gpus: 1, duration: 5}}\n'
    scenario = write(tmp_path, "events:\n" + events, "scenario.yaml")
    job = write(tmp_path, 'name: "j\\e]0;owned\\a"\ncommand: "true"\n', "job.yaml")
    for argv, shown in [
        (["replay", str(scenario)], "a\\x1b[2Jb"),
        (["validate", str(scenario)], ""),
        (["validate", str(job)], "j\\x1b]0;owned\\x07"),
    ]:
        code = main(argv)
        out = capsys.readouterr()
        assert code in (0, 2) and BUG not in out.err
        assert "\x1b" not in out.out + out.err and "\x07" not in out.out + out.err
        assert code == 2 or shown in out.out


def test_submitting_a_file_with_an_infinite_cpu_is_a_message(tmp_path, capsys) -> None:
    spec = write(tmp_path, "name: inf\ncommand: 'true'\ncpu: .inf\n", "job.yaml")
    assert main(["submit", str(spec), "--url", "http://127.0.0.1:9", "--token", "t"]) == 2
    err = capsys.readouterr().err
    assert "cpu: inf cannot be sent to the service; give a finite number" in err
    assert main(["submit", "--cpu", "nan", "--url", "http://127.0.0.1:9", "--", "true"]) == 2
    assert "cpu: nan cannot be sent" in capsys.readouterr().err


# ---- strace logs still being written ----------------------------------------------------------


def test_a_truncated_gz_log_is_parsed_up_to_the_cut_with_a_note(tmp_path, capsys) -> None:
    lines = [f'{100 + i % 7}  openat(AT_FDCWD, "/tmp/f{i * 7919}", O_RDONLY) = {i % 50}\n'
             for i in range(20000)]  # fmt: skip
    whole = gzip.compress("".join(lines).encode())
    path = tmp_path / "train.strace.gz"
    path.write_bytes(whole[: len(whole) // 2])
    assert main(["strace", "parse", str(path)]) == 0
    out = capsys.readouterr().out
    note = next(line for line in out.splitlines() if "the file ends mid-stream" in line)
    parsed = int(note.rsplit(" ", 1)[1])
    assert 1000 < parsed < 20000
    assert f"lines: {parsed} = " in out and "openat" in out
    assert main(["strace", "parse", "--json", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"parsed up to line {parsed}" in captured.out and "note:" in captured.err


def test_a_whole_gz_log_has_no_note(tmp_path, capsys) -> None:
    path = tmp_path / "ok.strace.gz"
    path.write_bytes(gzip.compress(b'1  openat(AT_FDCWD, "/x", O_RDONLY) = 3\n' * 100))
    assert main(["strace", "parse", str(path)]) == 0
    out = capsys.readouterr().out
    assert "lines: 100 = 100 parsed" in out and "note" not in out


def test_a_gz_log_with_damaged_bytes_is_parsed_up_to_the_damage(tmp_path, capsys) -> None:
    good = gzip.compress(b"1  close(3) = 0\n" * 50)
    path = tmp_path / "bad.strace.gz"
    path.write_bytes(good[:-8] + b"\x00" * 8)  # the trailer's CRC no longer matches
    assert main(["strace", "parse", str(path)]) == 0
    out = capsys.readouterr().out
    assert "the compressed data is damaged there: parsed up to line 50" in out


def test_simulate_says_what_is_wrong_with_a_priority_name_or_an_infinite_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two inputs that ended in "internal error": a priority word the parser does not know, and
    a generic CSV row whose GPU count is 'inf' (an OverflowError in the row check)."""
    trace = tmp_path / "jobs.csv"
    trace.write_text(
        "submit_time,vc,user,gpus,duration,status\n0,default,u,inf,10,Pass\n5,default,u,1,10,Pass\n"
    )
    machines = tmp_path / "machines.csv"
    machines.write_text("machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm1,2, 12GB\n")
    base = ["simulate", "--trace", str(trace), "--cluster", str(machines), "--policy", "fifo"]
    assert main([*base, "--priority", "opportunistic", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--priority: unknown priority 'opportunistic'" in err and "internal error" not in err
    assert main([*base, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "line 2: gpus 'inf' must be a whole number" in out
    assert main([*base, "--strict", "--quiet"]) == 2
    assert "gpus 'inf'" in capsys.readouterr().err
