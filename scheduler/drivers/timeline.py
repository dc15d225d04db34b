"""The replay's text output: one block per event with a table of the jobs."""

from __future__ import annotations

from typing import Any


def render(steps: list[dict[str, Any]], *, virtual: bool = False) -> str:
    lines = []
    if virtual:
        lines.append("cluster: VIRTUAL (GPU slots, no real GPUs)")
    for step in steps:
        vcs = "  ".join(
            f"{name} {v['used_gpus']}/{v['guaranteed_gpus']}"
            + (f" +{v['opportunistic_gpus']} oppo" if v["opportunistic_gpus"] else "")
            for name, v in step["vcs"].items()
        )
        lines.append(f"t={step['t']:g}  {step['event']}   [GPUs used/guaranteed: {vcs}]")
        rows = [("job", "vc", "prio", "state", "pos", "nodes", "reason")]
        for job in step["jobs"]:
            nodes = ",".join(sorted({t["node"] for t in job["tasks"] if t["node"]}))
            pos = "" if job["queue_position"] is None else str(job["queue_position"])
            rows.append(
                (
                    job["name"],
                    job["vc"],
                    str(job["priority"]),
                    job["state"],
                    pos,
                    nodes,
                    job["reason"],
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        for row in rows:
            cells = [c.ljust(w) for c, w in zip(row[:6], widths, strict=True)]
            lines.append("    " + "  ".join(cells) + "  " + row[6])
    return "\n".join(lines)
