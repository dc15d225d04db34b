"""YAML with line numbers, so that every config or spec error can name the line it is about.

PyYAML forgets where a value came from once it builds plain dicts; the loader here keeps the
line of every mapping, key and list item in the containers it builds (``LineDict``,
``LineList``), which otherwise behave as ``dict`` and ``list``.
"""

from __future__ import annotations

from typing import Any

import yaml

from labhive.scheduler.errors import UserError


class LineDict(dict[Any, Any]):
    """A mapping that remembers its own line and the line of each key (1-based)."""

    line: int | None = None
    key_lines: dict[Any, int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key_lines = {}

    def line_of(self, key: Any) -> int | None:
        return self.key_lines.get(key, self.line)


class LineList(list[Any]):
    """A sequence that remembers its own line and the line of each item (1-based)."""

    line: int | None = None
    item_lines: list[int]

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.item_lines = []

    def line_of(self, index: int) -> int | None:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


class YamlSyntaxError(UserError):
    """The text is not YAML at all."""


def line_of(container: Any, key: Any = None) -> int | None:
    """The line of ``container[key]`` (or of the container) when it was read from YAML."""
    if isinstance(container, (LineDict, LineList)):
        return container.line if key is None else container.line_of(key)
    return None


def _loader(offset: int) -> type[yaml.SafeLoader]:
    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
        loader.flatten_mapping(node)
        out = LineDict()
        out.line = node.start_mark.line + 1 + offset
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1 + offset
            if key in out:
                raise YamlSyntaxError(f"line {line}: duplicate key {key!r}; keep only one")
            out[key] = loader.construct_object(value_node, deep=True)
            out.key_lines[key] = line
        return out

    def sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> LineList:
        out = LineList()
        out.line = node.start_mark.line + 1 + offset
        for item in node.value:
            out.append(loader.construct_object(item, deep=True))
            out.item_lines.append(item.start_mark.line + 1 + offset)
        return out

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, sequence)
    return Loader


def load_yaml(text: str, *, origin: str = "", offset: int = 0) -> Any:
    """Parse ``text``; a syntax error becomes a ``YamlSyntaxError`` naming the line.

    ``offset`` shifts every line number: a document embedded as a block scalar in another file
    (OpenPAI's ``hivedscheduler: config: |``) then reports lines of the outer file.
    """
    where = f"{origin} " if origin else ""
    try:
        return yaml.load(text, Loader=_loader(offset))
    except YamlSyntaxError as err:
        raise YamlSyntaxError(f"{where}{err}") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f"line {mark.line + 1 + offset}: " if mark else ""
        problem = err.problem or err.context or "cannot be parsed"
        raise YamlSyntaxError(f"{where}{line}not valid YAML: {problem}") from None
    except yaml.YAMLError as err:
        raise YamlSyntaxError(f"{where}not valid YAML: {err}") from None
