"""The cluster map: nodes as rows, GPUs as squares, coloured by the VC of the job using them.

An SVG string, so the same picture is the widget's content and the report's ``text/html``;
a virtual cluster says so in its title, since its GPUs are slots, not devices.
"""

from __future__ import annotations

from html import escape

from labhive.kernel_ext.facts import ClusterFacts, NodeFacts

PALETTE = ("#2563eb", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#65a30d", "#b45309")
FREE = "#e5e7eb"
DOWN = "#fca5a5"
OTHER = "#374151"  # a job whose VC this user is not shown (another user's)
CELL, GAP, LABEL_W, TITLE_H = 28, 4, 120, 24


def vc_colours(cluster: ClusterFacts) -> dict[str, str]:
    names = sorted({vc.name for vc in cluster.vcs} | set(cluster.job_vcs.values()))
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def cluster_svg(cluster: ClusterFacts) -> str:
    colours = vc_colours(cluster)
    width_gpus = max((len(n.gpus) for n in cluster.nodes), default=0)
    width = LABEL_W + width_gpus * (CELL + GAP) + GAP
    legend_y = TITLE_H + len(cluster.nodes) * (CELL + GAP) + 8
    height = legend_y + 20
    width = max(width, 90 * (len(colours) + 2))
    title = "virtual cluster (GPU slots, no devices)" if cluster.virtual else "cluster"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="labhive-cluster" width="{width}" '
        f'height="{height}" font-family="sans-serif" font-size="12">',
        f'<text x="0" y="16" font-weight="bold">{escape(title)}</text>',
    ]
    for row, node in enumerate(cluster.nodes):
        y = TITLE_H + row * (CELL + GAP)
        label = node.name + ("" if node.healthy else " (down)")
        out.append(
            f'<text x="0" y="{y + CELL * 0.65:.0f}">{escape(label)}'
            f"<title>{escape(_health(node))}</title></text>"
        )
        for col, gpu in enumerate(node.gpus):
            x = LABEL_W + col * (CELL + GAP)
            job = node.used.get(gpu)
            fill = DOWN if not node.healthy else FREE
            tip = f"{node.name} GPU {gpu}: free"
            if job is not None:
                vc = cluster.job_vcs.get(job)
                fill = colours.get(vc or "", OTHER)
                tip = f"{node.name} GPU {gpu}: job {job}" + (f" ({vc})" if vc else "")
                shared = node.share_line(gpu)
                if shared:  # "n0 GPU 0: 0.75 used by 2 jobs (12: 0.5, 13: 0.25)"
                    who = ", ".join(f"{j}: {s:g}" for j, s in node.shares[gpu])
                    tip = f"{node.name} {shared} ({who})" + (f" ({vc})" if vc else "")
            out.append(
                f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" rx="3" fill="{fill}">'
                f"<title>{escape(tip)}</title></rect>"
            )
            if job is not None:
                out.append(
                    f'<text x="{x + CELL / 2:.0f}" y="{y + CELL * 0.65:.0f}" fill="white" '
                    f'text-anchor="middle" font-size="9">{escape(job[-4:])}</text>'
                )
    legend = [(f"job in {vc}", colour) for vc, colour in colours.items()] + [("free", FREE)]
    if _others(cluster):
        legend.append((OTHER_LABEL, OTHER))
    x = 0
    for label, colour in legend:
        out.append(f'<rect x="{x}" y="{legend_y}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{x + 16}" y="{legend_y + 11}">{escape(label)}</text>')
        x += 16 + 7 * len(label) + 14
    out.append("</svg>")
    return "".join(out).replace(f'width="{width}"', f'width="{max(width, x)}"', 1)


OTHER_LABEL = "another user's job (hidden from you)"


def _others(cluster: ClusterFacts) -> bool:
    """Whether some GPU holds a job this user may not see (drawn in OTHER)."""
    return any(j not in cluster.job_vcs for n in cluster.nodes for j in n.used.values())


def cluster_text(cluster: ClusterFacts) -> str:
    """The same map in characters: a letter per VC, ``.`` free, ``x`` down, ``#`` another
    user's job."""
    letters = {name: chr(ord("A") + i) for i, name in enumerate(vc_colours(cluster))}
    head = "virtual cluster (GPU slots, no devices)" if cluster.virtual else "cluster"
    lines = [head]
    for node in cluster.nodes:
        marks = []
        for gpu in node.gpus:
            job = node.used.get(gpu)
            if not node.healthy:
                marks.append("x")
            elif job is None:
                marks.append(".")
            else:
                marks.append(letters.get(cluster.job_vcs.get(job, ""), "#"))
        down = "" if node.healthy else f"  {_health(node)}"
        shared = [line for g in node.gpus if (line := node.share_line(g))]
        tail = f"  {'; '.join(shared)}" if shared else ""
        lines.append(f"{node.name:<16} {''.join(marks)}{down}{tail}")
    if letters:
        key = [f"{letter}=job in {vc}" for vc, letter in letters.items()] + [".=free"]
        if _others(cluster):
            key.append(f"#={OTHER_LABEL}")
        lines.append("  ".join(key))
    return "\n".join(lines)


def _health(node: NodeFacts) -> str:
    if node.healthy:
        return "in service"
    return f"down: {node.reason}" if node.reason and node.reason != "down" else "down"
