"""``labhive monitoring``: the shipped Prometheus/Grafana files, and one NVML reading.

``files DIR`` writes the alert rules, scrape config and dashboard where an admin's Prometheus
and Grafana can load them. ``sample`` reads this machine's GPUs once through the same sampler
the service runs and prints what it saw, field by field, including what NVML would not say
and why: the first thing to run on a new GPU machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from labhive.scheduler.core.errors import UserError

if TYPE_CHECKING:
    from labhive.scheduler.observe.nvml import Sampler

FILES = ("labhive-alerts.yml", "prometheus.yml", "labhive-dashboard.json")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "monitoring", help="Prometheus rules, scrape config, Grafana dashboard; read the GPUs"
    )
    sub = parser.add_subparsers(dest="monitoring_command", metavar="ACTION", required=True)
    files = sub.add_parser("files", help="write the alert rules, scrape config and dashboard")
    files.add_argument("dir", type=Path, help="directory to write them to (created if needed)")
    files.add_argument("--force", action="store_true", help="overwrite existing files")
    files.set_defaults(func=write_files)
    sample = sub.add_parser("sample", help="read this machine's GPUs once through NVML")
    sample.add_argument("--json", action="store_true", help="print JSON")
    sample.set_defaults(func=print_sample)


def write_files(args: argparse.Namespace) -> int:
    source = resources.files("labhive.scheduler.observe") / "monitoring"
    target: Path = args.dir
    target.mkdir(parents=True, exist_ok=True)
    clash = [name for name in FILES if (target / name).exists()]
    if clash and not args.force:
        raise UserError(f"{', '.join(clash)} already in {target}; add --force to overwrite")
    for name in FILES:
        with resources.as_file(source / name) as path:
            shutil.copyfile(path, target / name)
        print(target / name)
    return 0


def print_sample(args: argparse.Namespace, sampler: Sampler | None = None) -> int:
    from labhive.scheduler.observe.nvml import Sampler

    sampler = sampler or Sampler()
    sample = sampler.sample()
    if sample is None:
        print(f"no GPU readings: {sampler.why_unavailable}")
        return 1
    try:
        if args.json:
            print(json.dumps(dataclasses.asdict(sample), indent=1, default=str))
            return 0
        print(f"{sample.hostname}: driver {sample.driver}, {len(sample.gpus)} GPU(s)")
        for gpu in sample.gpus:
            print(f"GPU {gpu.index} {gpu.name} {gpu.uuid} {gpu.pci_bus_id}")
            for f in dataclasses.fields(gpu):
                value = getattr(gpu, f.name)
                if f.name in ("index", "name", "uuid", "pci_bus_id", "missing", "processes"):
                    continue
                if value is not None:
                    print(f"  {f.name:18} {value}")
            for p in gpu.processes:
                print(f"  pid {p.pid}: {p.used_mib} MiB, SM {p.sm_util}%, memory {p.mem_util}%")
            for name, why in gpu.missing.items():
                print(f"  {name:18} (not read: {why})")
    finally:
        sampler.close()
    return 0
