"""Given a client handle, expect it to be shown by whoever registered as the client's display:
the kernel extension once it is imported, plain text before; the client imports no Jupyter."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
import labhive.client as lh
from labhive.scheduler import client

job = lh.Job(client=None, data={"id": "7", "name": "a", "state": "WAITING"})
assert not [m for m in sys.modules if m.startswith(("labhive.kernel_ext", "IPython"))]
try:
    job.widget()
except lh.LabHiveError as err:
    print("refused:", err)
job._ipython_display_()

import labhive.kernel_ext
from labhive.kernel_ext.display import NotebookDisplay

print("registered:", type(client._display).__name__)
shown = []
class Probe:
    def show(self, job): shown.append(("show", job.id))
    def show_table(self, table): shown.append(("table", len(table.jobs)))
    def widget(self, job): return "widget"
    def strace(self, job, task, top): return [task, top]
previous = client.register_display(Probe())
assert isinstance(previous, NotebookDisplay)
job._ipython_display_()
lh.JobTable([job], [{"lr": 1}])._ipython_display_()
print("probe:", shown, job.widget(), job.strace("main-0", 3))
"""


def test_a_handle_shows_through_the_registered_display_only() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == (
        "refused: showing a job needs the notebook extension: run %load_ext labhive.kernel_ext "
        "first"
    )
    assert lines[1].startswith("Job(data={'id': '7'")  # no extension: the plain repr
    assert lines[2] == "registered: NotebookDisplay"
    assert lines[3] == "probe: [('show', '7'), ('table', 1)] widget ['main-0', 3]"
