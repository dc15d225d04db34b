"""Given a notebook in a lab directory that holds train.py, expect ``%submit -- python
train.py`` to run in that directory (a kernel starts in its notebook's), and a job that fails to
report the end of its stderr in the cell's output (papermill's report), where the reason is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_support import Kernel, labhive_serve

TRAIN = "import os\nprint('trained in', os.getcwd())\n"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    with labhive_serve(tmp_path_factory.mktemp("service")) as svc:
        k = Kernel(svc.env("alice"))
        try:
            assert k.run("%load_ext labhive.kernel_ext").error is None
            yield k
        finally:
            k.close()


def test_submit_from_a_notebooks_directory_runs_train_py_there(kernel: Kernel, tmp_path: Path):
    lab = tmp_path / "lab3"
    lab.mkdir()
    (lab / "train.py").write_text(TRAIN)
    assert kernel.run(f"import os; os.chdir({str(lab)!r})").error is None  # the notebook's dir
    out = kernel.run("%submit --name train --gpus 0 -- python train.py", timeout=90)
    assert out.error is None, out.stderr
    assert "SUCCEEDED" in out.stdout, out.stdout
    assert f"trained in {lab}" in out.stdout


def test_a_failed_submit_prints_the_end_of_its_stderr(kernel: Kernel, tmp_path: Path):
    assert kernel.run(f"import os; os.chdir({str(tmp_path)!r})").error is None
    out = kernel.run("%submit --name missing --gpus 0 -- python no_such_script.py", timeout=90)
    assert "FAILED" in out.stdout, out.stdout
    assert "--- stderr (last 1 lines) of missing ---" in out.stdout, out.stdout
    assert "can't open file" in out.stdout and "no_such_script.py" in out.stdout
