"""The words that mark a task whose command never ran.

A module of its own so that the per-task supervisor (``supervise.py``, one Python process per
running task) can use them without importing ``base`` and with it the job model (``core.jobs``,
``yaml``, ``argparse``): that import was ~0.05 CPU s of every task's start, and a class of 50
starts a server and a job per student on two cores (docs/hub.md, "A class of 50").
"""

#: How a ``TaskExit.reason`` starts when the command never ran (its cwd refused, say): the
#: job's why-text carries such a reason, as it does a memory kill.
NOT_STARTED = "cannot start the task: "
