"""Given the ``labhive monitoring`` command, expect the shipped files written where asked (and
never over an admin's own without --force), and one NVML reading printed field by field."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from nvml_recorded import RecordedNVML, load_h100, nvml_loads

from labhive.scheduler.cli import main
from labhive.scheduler.observe.monitoring_cli import FILES, print_sample
from labhive.scheduler.observe.nvml import Sampler


def test_files_are_written_once(tmp_path, capsys) -> None:
    assert main(["monitoring", "files", str(tmp_path / "prom")]) == 0
    assert sorted(p.name for p in (tmp_path / "prom").iterdir()) == sorted(FILES)
    assert main(["monitoring", "files", str(tmp_path / "prom")]) == 2
    assert "add --force" in capsys.readouterr().err
    assert main(["monitoring", "files", "--force", str(tmp_path / "prom")]) == 0


@pytest.mark.skipif(
    nvml_loads(), reason="this machine has an NVIDIA driver: the command reads the real GPUs"
)
def test_sample_without_a_driver_says_why() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "labhive.scheduler.cli", "monitoring", "sample"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "no GPU readings: no NVIDIA driver" in out.stdout


def test_sample_prints_every_field_and_what_was_not_read(capsys) -> None:
    sampler = Sampler(RecordedNVML(load_h100()), hostname="gpu-node-1")
    assert print_sample(argparse.Namespace(json=False), sampler) == 0
    out = capsys.readouterr().out
    assert "GPU 0 NVIDIA H100 80GB HBM3 GPU-e7c046e5" in out
    assert "power_w            291.789" in out
    assert "fan_speed_pct      (not read: not supported)" in out
    assert "pid 1118:" in out
