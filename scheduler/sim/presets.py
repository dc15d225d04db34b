"""``labhive simulate --model NAME``: a peer simulator's model as LabHive's settings.

A researcher who compares with Tiresias or Helios should not have to know which knobs make
LabHive behave like them (docs/policies.md once named the wrong ones: ``promote_knob=8`` gave
an average JCT 35% worse than Tiresias'). Each preset is checked against the peer's own
figure in tests/test_sim_presets.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from labhive.scheduler.core.errors import UserError


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    #: the policy when ``--policy`` is not given (None: ``--policy`` is required)
    policy: str | None
    #: options added to every ``--policy`` (e.g. ``vc_nodes=true``)
    options: str
    #: policies the model applies to (empty: any)
    policies: tuple[str, ...]
    checkpoint: float | None
    locality: str | None
    about: str


MODELS = {
    "tiresias": Preset(
        "tiresias",
        # dlas-gpu in Tiresias' simulator (run_sim.py --schedule=dlas-gpu): queues by attained
        # GPU-seconds, no starvation promotion, a job preempted whenever a higher queue needs
        # its GPUs (no minimum run), or when it is demoted behind jobs waiting in its new
        # queue (same_queue), resumed where it stopped, placed on any free GPUs (--scheme=count)
        policy="las:promote_knob=0,quantum=0,same_queue=true",
        options="",
        policies=("las",),
        checkpoint=1.0,
        locality="anywhere",
        about="Tiresias' dlas-gpu: las:promote_knob=0,quantum=0,same_queue=true --checkpoint 1 "
        "--locality anywhere",
    ),
    "helios": Preset(
        "helios",
        # Helios' simulator: every VC a set of whole nodes, its jobs on those nodes only
        policy="fifo",
        options="vc_nodes=true",
        policies=("fifo", "sjf", "las"),
        checkpoint=None,
        locality=None,
        about="Helios' VCs: each VC owns whole nodes (POLICY:vc_nodes=true; fifo unless "
        "--policy says fifo, sjf or las)",
    ),
}


def apply_model(
    model: str, policies: list[str] | None, checkpoint: float | None, locality: str | None
) -> tuple[list[str], float | None, str | None]:
    """The policies, checkpoint interval and locality a run under ``model`` uses. A flag that
    contradicts the model is an error, not silently overridden: the run would not be the
    peer's model any more, yet would be reported as one."""
    preset = MODELS.get(model)
    if preset is None:
        raise UserError(f"unknown --model {model!r}; choose one of {', '.join(sorted(MODELS))}")
    for flag, given, wanted in (
        ("--checkpoint", checkpoint, preset.checkpoint),
        ("--locality", locality, preset.locality),
    ):
        if wanted is not None and given is not None and given != wanted:
            raise UserError(
                f"--model {model} means {preset.about}; {flag} {given} contradicts it: drop "
                f"{flag}, or drop --model and give the settings you want"
            )
    if not policies:
        if preset.policy is None:
            raise UserError(f"--model {model} needs --policy")
        policies = [preset.policy]
    elif preset.policy is not None and model == "tiresias":
        raise UserError(
            f"--model tiresias is one policy ({preset.about}); drop --policy, or drop --model "
            "to compare other policies"
        )
    out = [_with_options(p, preset) for p in policies]
    return (
        out,
        checkpoint if checkpoint is not None else preset.checkpoint,
        locality if locality is not None else preset.locality,
    )


def _with_options(policy: str, preset: Preset) -> str:
    name, _, rest = policy.partition(":")
    if preset.policies and name.strip() not in preset.policies:
        raise UserError(
            f"--model {preset.name} applies to {', '.join(preset.policies)}, not {name}; "
            f"({preset.about})"
        )
    if not preset.options:
        return policy
    return f"{name}:{rest + ',' if rest else ''}{preset.options}"
