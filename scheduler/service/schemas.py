"""The REST API's request and response shapes; FastAPI turns them into the OpenAPI document.

A submission is either the short form (the keys of ``labhive submit`` flags and ``%submit``) or
an OpenPAI protocol-v2 job, unchanged; both arrive as one JSON object whose common keys are typed
here, so a wrong type is refused before the job parser sees it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Name = Field(default=None, min_length=1, max_length=256)


class JobRequest(BaseModel):
    """A job: short form (``tasks``, ``gpus``, ``command``...) or OpenPAI v2 (``taskRoles``)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {"name": "hello", "vc": "default", "gpus": 1, "command": "echo hello"},
                {
                    "protocolVersion": 2,
                    "name": "train",
                    "taskRoles": {
                        "worker": {
                            "instances": 2,
                            "resourcePerInstance": {"gpu": 1, "cpu": 2, "memoryMB": 4096},
                            "commands": ["python train.py"],
                        }
                    },
                    "defaults": {"virtualCluster": "default"},
                },
            ]
        },
    )

    name: str | None = Name
    vc: str | None = Field(default=None, min_length=1, max_length=128)
    priority: str | int | None = None
    tasks: int | None = Field(default=None, ge=1, le=10_000)
    gpus: int | float | None = Field(
        default=None,
        ge=0,
        le=10_000,
        description="GPUs per task, or a share of one GPU for a single task: 0.5, 0.25, 0.125",
    )
    cpu: float | None = Field(default=None, gt=0, le=100_000)
    memory_mb: int | None = Field(default=None, ge=0, le=1 << 40)
    cpu_limit: float | None = Field(
        default=None, gt=0, le=100_000, description="CPUs enforced (default: cpu, the guarantee)"
    )
    memory_limit_mb: int | None = Field(
        default=None, ge=0, le=1 << 40, description="MB enforced (default: memory_mb)"
    )
    cwd: str | None = Field(
        default=None,
        max_length=4096,
        description="absolute directory the tasks run in, entered as the user; default: a "
        "fresh per-task work dir",
    )
    retries: int | None = Field(default=None, ge=0, le=1000)
    command: str | list[str] | None = Field(default=None, max_length=100_000)
    gang: bool | None = None
    observe: str | None = Field(
        default=None, max_length=32, description="'strace' (the one choice): run each task under it"
    )
    sku: str | None = Field(default=None, max_length=128)
    image: str | None = Field(default=None, max_length=1024)
    duration: float | None = Field(default=None, ge=0)
    lazy_preemption: bool | None = None
    protocolVersion: int | str | None = None
    taskRoles: dict[str, Any] | None = None
    defaults: dict[str, Any] | None = None
    extras: dict[str, Any] | None = None
    jobRetryCount: int | None = Field(default=None, ge=0, le=1000)


class TaskOut(BaseModel):
    role: str
    index: int
    node: str
    #: Where the task's node is reached (a notebook server's URL host): 127.0.0.1 locally,
    #: the node's address on Slurm; None before the task runs, or for an executor without one.
    address: str | None = None
    gpus: list[int]
    state: str
    exit_code: int | None = None
    attempt: int
    limits: dict[str, Any] | None = None  # what the executor enforced (memory, cpu) and how
    run_as: dict[str, Any] | None = None  # the OS uid/gid it ran as, and whether users are apart


class JobOut(BaseModel):
    """A job as its owner (or an admin) sees it."""

    id: int
    name: str
    user: str
    owner_id: int | None = Field(None, description="the owner's account number (GET /me: id)")
    vc: str
    priority: int
    state: str
    attempt: int
    retries: int
    retries_used: int
    task_count: int
    gpus: int | float = Field(description="GPUs per job; a GPU share's fraction (0.25)")
    #: For a GPU share: what enforces it ("not enforced: shares are time-sliced ..." or MPS).
    gpu_sharing: str | None = None
    opportunistic: bool
    cancel_requested: bool
    reason: str
    why: str | None = None
    queue_position: int | None = None
    queue_length: int | None = None
    eta: float | None = None  # a waiting job's estimated start (epoch seconds)
    eta_low: float | None = None  # and its p10-p90 range
    eta_high: float | None = None
    #: No estimate: the job starts only after one with no finite duration ends (a notebook
    #: server stops, say); what that is, in words ("a notebook server in VC default to stop").
    waits_for: str | None = None
    exit_code: int | None = None
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    tasks: list[TaskOut] = []
    spec: dict[str, Any] | None = None
    stopping: StopNoticeOut | None = None  # a pending stop (reason, deadline), while RUNNING


class StopNoticeOut(BaseModel):
    """A running job's pending stop: why, and when (epoch seconds) at the latest."""

    reason: str
    deadline: float
    deadline_iso: str
    kind: str = Field(description="culled, time-limit, announced or stopping (SIGTERM sent)")


class StopNoticeRequest(BaseModel):
    """``POST /jobs/{id}/stop-notice`` (admins): announce a stop ``in_s`` from now; ``in_s`` 0
    stops the job now (``culled``: as a cull, counted on /metrics with ``gpu_idle_s``)."""

    reason: str = Field(min_length=1, max_length=500)
    in_s: float = Field(ge=0, le=7 * 86400)
    culled: bool = False
    gpu_idle_s: float = Field(0.0, ge=0, le=366 * 86400)


class JobList(BaseModel):
    jobs: list[JobOut]


class EventOut(BaseModel):
    time: float
    from_state: str | None
    to_state: str
    attempt: int
    reason: str
    why: str | None = None


class EventList(BaseModel):
    job_id: int
    events: list[EventOut]


class LogChunk(BaseModel):
    """``data`` holds bytes ``offset`` to ``next_offset`` of the stream (UTF-8, errors replaced);
    ``complete`` says the task ended and nothing more will come."""

    job_id: int
    attempt: int
    task: str | None
    stream: str
    offset: int
    next_offset: int
    data: str
    complete: bool
    tasks: list[str]


class Observation(BaseModel):
    task: str
    attempt: int
    kind: str
    path: str
    size: int


class ObservationList(BaseModel):
    job_id: int
    observations: list[Observation]


class QueueEntry(BaseModel):
    """One of your active jobs (an admin: anyone's) in ``GET /queue``."""

    position: int | None
    vc: str
    state: str
    gpus: int | float  # a GPU share's fraction (0.25)
    tasks: int
    priority: int
    opportunistic: bool = False
    mine: bool
    id: int | None = None
    name: str | None = None
    user: str | None = None
    why: str | None = None
    eta: float | None = None  # estimated start and its p10-p90 range (waiting jobs)
    eta_low: float | None = None
    eta_high: float | None = None
    waits_for: str | None = None  # no estimate: what it waits for (see JobOut)


class VCOut(BaseModel):
    name: str
    guaranteed_gpus: int
    #: A GPU share counts as its fraction: a whole number unless shares run.
    used_gpus: int | float
    opportunistic_gpus: int | float
    waiting: int
    may_submit: bool


class OthersOut(BaseModel):
    """Other users' active jobs in one VC, as counts: no ids, names, users or positions."""

    running: int = 0
    waiting: int = 0
    running_gpus: int = Field(default=0, description="the GPUs their running jobs hold")


class StandingOut(BaseModel):
    """Your fair-share standing in one VC (``hived.standing``): what you used lately, your
    share, your rank among the VC's users and how many jobs are ahead of your next one."""

    vc: str
    usage_gpu_hours: float = Field(description="GPU-hours used in the VC, decayed by half_life_s")
    running_gpus: float = Field(description="GPUs held now; a share counts as its fraction")
    share: float = Field(description="your weight (fairShare.shares; 1 unless named)")
    share_of_vc: float = Field(description="your weight over all the VC's users' weights")
    users: int = Field(description="the VC's users counted: with usage, running or waiting")
    rank: int = Field(description="1 goes first: lower usage over share")
    waiting: int
    position: int | None = Field(description="your first waiting job's place in the VC's line")
    ahead: int
    ahead_less_used: int = Field(description="of the jobs ahead, those of users with less usage")
    half_life_s: float
    text: str = Field(description="the standing in words, as labhive queue shows it")


class StandingList(BaseModel):
    """``GET /me/standing``: per VC you may submit to; empty with ``fair_share`` false."""

    fair_share: bool
    user: str
    vcs: dict[str, StandingOut] = Field(default_factory=dict)
    note: str = ""


class QueueOut(BaseModel):
    """One page of the queue: your active jobs as rows (an admin: everyone's), running first,
    then waiting by priority and submission; everyone else's as counts per VC in ``others``."""

    vcs: dict[str, VCOut]
    running: list[QueueEntry]
    waiting: list[QueueEntry]
    others: dict[str, OthersOut] = Field(
        default_factory=dict, description="VC -> other users' jobs there (empty for admins)"
    )
    total: int = Field(0, description="rows in all pages")
    offset: int = 0
    limit: int = 100
    next_offset: int | None = Field(None, description="the next page's offset; None: no more")
    standing: dict[str, StandingOut] = Field(
        default_factory=dict,
        description="VC -> your fair-share standing there (empty when fair share is off)",
    )


class ShareOut(BaseModel):
    """One job's share of a GPU."""

    job: int | str
    share: float = Field(description="the fraction of the GPU: 0.5, 0.25 or 0.125")


class GPUOut(BaseModel):
    node: str
    index: int
    sku: str | None
    healthy: bool
    job: int | str | None = Field(
        description="the job's id, or \"another user's job\" for a non-admin's view of others'"
    )
    virtual: bool
    #: For a GPU that hosts shares: the sharers (``job`` names one of them) and how much of
    #: the GPU they use together (0.125..1); empty and None for a GPU used whole or idle.
    shares: list[ShareOut] = []
    shared_used: float | None = None


class NodeOut(BaseModel):
    name: str
    sku: str | None
    gpus: list[int]
    healthy: bool
    reason: str
    used: dict[str, int | str] = Field(
        description="GPU index -> job id (\"another user's job\" for others' jobs to non-admins)"
    )
    held: bool = Field(
        False, description="an admin took the node down; only POST /nodes/{node}/up lifts it"
    )
    #: GPU index -> its sharers, for GPUs that host GPU shares (``used`` names one of them).
    shares: dict[str, list[ShareOut]] = {}


class NodeDownRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=500, description="why, shown to users in the cluster view")
    notice_s: float = Field(
        0.0, ge=0, le=86400, description="tell its jobs first; take it down this much later"
    )


class ClusterOut(BaseModel):
    virtual: bool
    policy: str
    nodes: list[NodeOut]
    vcs: dict[str, VCOut]


class VCList(BaseModel):
    vcs: dict[str, VCOut]


class GPUList(BaseModel):
    gpus: list[GPUOut]


class Health(BaseModel):
    status: str
    version: str
    database: str
    loop_age_s: float  # seconds since the scheduler loop's last good pass
    loop_last_pass: float | None = None  # when it was (epoch seconds)
    loop_failures: int = 0  # failed passes in a row (the loop backs off and retries)
    loop_error: str | None = None  # the kind of the last failure, while failing
    policy: str
    executor: str
    #: "ok", or why submissions get 507 (the data dir's file system below its reserve).
    disk: str = "ok"


class ErrorOut(BaseModel):
    detail: str
