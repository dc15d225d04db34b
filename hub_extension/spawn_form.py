"""The spawner's options form, rendered from a Jinja2 template (as KubeSpawner's profile list
is) so that a site can restyle or reword it without subclassing the spawner: the template
gets only plain values, and autoescaping makes each of them text."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES = Path(__file__).parent / "templates"
DEFAULT_TEMPLATE = "labhive_spawn_form.html"


@dataclass(frozen=True)
class FormValues:
    """What the form shows; the template decides how."""

    last_end: str = ""
    vcs: list[str] = field(default_factory=list)
    selected_vc: str = ""
    sizes: list[dict[str, str]] = field(default_factory=list)
    standing: list[tuple[str, str]] = field(default_factory=list)

    @property
    def own_vc(self) -> str:
        return self.vcs[0] if self.vcs else ""


def render(values: FormValues, template_path: str = "") -> str:
    """The form's HTML: the packaged template, or the site's own at ``template_path``. No form
    at all (only the notice of how the last server ended, if any) when there is nothing to
    choose, so that the server starts at once."""
    env, name = _environment(template_path)
    html = env.get_template(name).render(
        last_end=values.last_end,
        vcs=values.vcs,
        selected_vc=values.selected_vc,
        own_vc=values.own_vc,
        sizes=values.sizes,
        standing=values.standing,
    )
    return html.strip()


def _environment(template_path: str) -> tuple[jinja2.Environment, str]:
    folder, name = (TEMPLATES, DEFAULT_TEMPLATE)
    if template_path:
        path = Path(template_path)
        if not path.is_file():
            raise FileNotFoundError(
                f"LabHiveSpawner.options_form_template {template_path!r} is not a file: give the "
                f"path of a Jinja2 template (start from {TEMPLATES / DEFAULT_TEMPLATE})"
            )
        folder, name = path.parent, path.name
    return _cached_env(str(folder)), name


_ENVS: dict[str, jinja2.Environment] = {}


def _cached_env(folder: str) -> jinja2.Environment:
    """One environment per folder, so a template is compiled once per hub, not per form."""
    if folder not in _ENVS:
        _ENVS[folder] = jinja2.Environment(
            loader=jinja2.FileSystemLoader(folder),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            auto_reload=True,
        )
    return _ENVS[folder]


def sizes_shown(profiles: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The profiles as the template shows them (slug and display name, both text)."""
    return [
        {"slug": str(p["slug"]), "display_name": str(p.get("display_name", p["slug"]))}
        for p in profiles
    ]
