"""HiveD's algorithm: virtual clusters of topology-aware cells, priorities, gangs, preemption.

The front door is ``HivedScheduler`` (events in, decisions out, as every policy); drivers pick it
by name through ``labhive.scheduler.policies`` ("hived"). The rest is internal to the package:

- ``core``: the scheduler itself, the front door over ``base`` (the shared state and its
  bookkeeping; ``job``: the job record), holding one part per concern, each an object with its
  own state that the others call through ``parts``' protocols: ``queueing`` (with ``turns``),
  ``sizing``, ``attempt`` (with ``failures``, which records why a search failed), ``preempt``,
  ``health``, ``adopt`` and ``shares`` (GPU shares, over ``share_book``);
- ``cells``: the physical cell tree; ``vc``: virtual clusters, their bindings and counters;
- ``placement``: finding leaf cells for a job's tasks (the topology-aware search);
- ``queue``: per-VC queues and the failed-search records that prune dominated jobs;
- ``cpu_pool``: jobs that take no GPU;
- ``admission``: the submit-time rules (a job its VC can never hold is rejected), a pure
  function of numbers derived once from the config (``Admission``), which drivers may use
  without a scheduler;
- ``shortfall``: the records of why a search failed;
- ``why``, ``views``: the read side (why a job waits, formatted from its record; what the cluster
  looks like), reading the scheduler through the protocols in ``state`` so that nothing here
  imports ``core`` back.
"""

from labhive.scheduler.hived.core import HivedScheduler

__all__ = ["HivedScheduler"]
