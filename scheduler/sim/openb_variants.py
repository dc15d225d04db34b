"""The FGD paper's trace variants, built from the Alibaba v2023 default pod list.

The paper's simulator repository (hkust-adsl/kubernetes-scheduler-simulator, data/README.md)
ships the variants as CSVs "sampled from the default one, emphasizing certain types of
workloads" and, for ``gpuspec``, the default list with GPU-type constraints added; it does not
ship how. What its files show, and what is built here the same way (each a seeded draw):

- ``gpushareN``: the CPU-only tasks kept; the GPU tasks drawn again (uniformly, with
  replacement) from the default list's sharing tasks and whole-GPU tasks, as many as before,
  so that sharing tasks ask for N% of the GPU capacity asked for (its gpushare40 and
  gpushare80: 40.1% and 80.0%; 7,064 GPU tasks as in the default list);
- ``multigpuN``: every task kept, and copies of multi-GPU tasks (drawn uniformly from the
  default list's) added until they ask for N% of the GPU capacity asked for (its multigpu20:
  20.4% with 172 tasks added; multigpu50: 50.3%, 909 added);
- ``gpuspecN``: N% of the GPU tasks, drawn at random, given a GPU-model constraint drawn from
  ``SPEC_MIX`` (its gpuspec33: 2,388 of 7,064 tasks, 33.8%).

``SPEC_MIX`` is data, not code: the constraint sets of the repository's
openb_pod_list_gpuspec33.csv, with how many of its constrained tasks carry each (the default
list has none, so the mix cannot be derived from it; the paper says a third of production GPU
tasks carry one).
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.sim.openb import Pod

#: Constraint sets of the repository's gpuspec33 list and how many tasks carry each.
SPEC_MIX: tuple[tuple[str, int], ...] = (
    ("T4", 1291),
    ("G2", 331),
    ("P100", 279),
    ("V100M16|V100M32", 141),
    ("P100|V100M16|V100M32", 103),
    ("G3", 86),
    ("G2|P100|T4|V100M16|V100M32", 39),
    ("P100|T4|V100M16|V100M32", 33),
    ("A10|G2|T4|V100M16|V100M32", 24),
    ("V100M32", 20),
    ("A10|T4", 6),
    ("P100|V100M16", 4),
    ("A10|G2|P100|T4|V100M16|V100M32", 3),
    ("T4|V100M16|V100M32", 3),
    ("V100M16", 3),
)
_NAME = re.compile(r"(gpushare|multigpu|gpuspec)(\d+)")


def build_variant(pods: list[Pod], variant: str, seed: int = 0) -> list[Pod]:
    """The pod list ``variant`` (``default``, ``gpushareN``, ``multigpuN``, ``gpuspecN``, N a
    percentage) built from ``pods`` (the default list), drawn with ``seed``."""
    if variant == "default":
        return list(pods)
    match = _NAME.fullmatch(variant)
    share = int(match.group(2)) / 100 if match else -1.0
    if match is None or not 0 < share < 1:
        raise UserError(
            f"unknown trace variant {variant!r}; give default, gpushareN, multigpuN or "
            "gpuspecN with N a percentage between 1 and 99 (the paper's: gpushare80, "
            "multigpu20, gpuspec33)"
        )
    rng = random.Random(seed)
    kind = match.group(1)
    if kind == "gpushare":
        return _gpushare(pods, share, rng)
    if kind == "multigpu":
        return _multigpu(pods, share, rng)
    return _gpuspec(pods, share, rng)


def _gpushare(pods: list[Pod], share: float, rng: random.Random) -> list[Pod]:
    sharing = [p for p in pods if p.sharing]
    whole = [p for p in pods if p.gpus > 0 and not p.sharing]
    n = len(sharing) + len(whole)
    if not sharing or not whole:
        raise UserError("gpushareN needs both sharing and whole-GPU tasks in the pod list")
    mean_s = sum(p.demand for p in sharing) / len(sharing)
    mean_w = sum(p.demand for p in whole) / len(whole)
    # s sharing tasks of n: s * mean_s = share * (s * mean_s + (n - s) * mean_w)
    s = round(share * n * mean_w / ((1 - share) * mean_s + share * mean_w))
    drawn = [rng.choice(sharing) for _ in range(s)] + [rng.choice(whole) for _ in range(n - s)]
    rng.shuffle(drawn)
    return _renamed([p for p in pods if p.gpus == 0] + drawn)


def _multigpu(pods: list[Pod], share: float, rng: random.Random) -> list[Pod]:
    multi = [p for p in pods if p.gpus > 1]
    if not multi:
        raise UserError("multigpuN needs multi-GPU tasks in the pod list to copy")
    total = sum(p.demand for p in pods)
    held = sum(p.demand for p in multi)
    added: list[Pod] = []
    while held < share * total:
        pod = rng.choice(multi)
        added.append(pod)
        held += pod.demand
        total += pod.demand
    return _renamed(list(pods) + added)


def _gpuspec(pods: list[Pod], share: float, rng: random.Random) -> list[Pod]:
    gpu = [i for i, p in enumerate(pods) if p.gpus > 0]
    chosen = rng.sample(gpu, round(share * len(gpu)))
    specs = [frozenset(s.split("|")) for s, _ in SPEC_MIX]
    weights = [n for _, n in SPEC_MIX]
    out = list(pods)
    for i in chosen:
        out[i] = replace(out[i], models=rng.choices(specs, weights)[0])
    return out


def _renamed(pods: list[Pod]) -> list[Pod]:
    """Copies get names of their own (``name#k``): a pod list's names stay unique."""
    seen: dict[str, int] = {}
    out = []
    for p in pods:
        k = seen.get(p.name, 0)
        seen[p.name] = k + 1
        out.append(p if k == 0 else replace(p, name=f"{p.name}#{k}"))
    return out
