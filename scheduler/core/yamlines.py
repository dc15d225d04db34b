"""YAML with line numbers, so that every config or spec error can name the line it is about.

PyYAML forgets where a value came from once it builds plain dicts; the loader here keeps the
line of every mapping, key and list item in the containers it builds (``LineDict``,
``LineList``), which otherwise behave as ``dict`` and ``list``.

It also bounds what a file can cost before anything reads it: its size, its nesting depth and
the number of values its aliases expand to (an "alias bomb" of nine nested lists of nine aliases
is 400 bytes of text and 43 million values), each refused at once with the limit named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from labhive.scheduler.core.errors import UserError


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


#: Larger files are refused unread: the biggest real config or scenario is a few hundred KB.
MAX_YAML_CHARS = 4 * 2**20
#: Mappings and lists inside each other; HiveD configs nest about ten deep.
MAX_YAML_DEPTH = 64
#: Values a document may hold once every alias is expanded.
MAX_YAML_VALUES = 1_000_000


class YamlSyntaxError(UserError):
    """The text is not YAML at all."""


class YamlLimitError(YamlSyntaxError):
    """The text is YAML but larger, deeper or more aliased than LabHive reads."""


def line_of(container: Any, key: Any = None) -> int | None:
    """The line of ``container[key]`` (or of the container) when it was read from YAML."""
    if isinstance(container, (LineDict, LineList)):
        return container.line if key is None else container.line_of(key)
    return None


def _loader(offset: int) -> type[yaml.SafeLoader]:
    class Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > MAX_YAML_DEPTH:
                    # PyYAML's stubs leave the parser's methods untyped
                    event = self.peek_event()  # type: ignore[no-untyped-call]
                    line = event.start_mark.line + 1 + offset
                    raise YamlLimitError(
                        f"line {line}: nested more than {MAX_YAML_DEPTH} levels deep "
                        "(mappings and lists inside each other); flatten the document"
                    )
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def compose_document(self) -> Any:
            node = super().compose_document()
            _check_expansion(node, offset)
            return node

        def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep=deep)
            except (ValueError, OverflowError) as err:  # '2020-13-45', '!!int 0x', 5000 digits
                line = node.start_mark.line + 1 + offset
                raise YamlSyntaxError(f"line {line}: not a valid value: {err}") from None

    def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
        loader.flatten_mapping(node)
        out = LineDict()
        out.line = node.start_mark.line + 1 + offset
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1 + offset
            if not _hashable(key):
                raise YamlSyntaxError(
                    f"line {line}: a key must be a plain value such as a name or a number, "
                    f"not a {_kind(key)}"
                )
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


def read_text(path: Path, what: str) -> str:
    """The text of ``path``; a file that cannot be read as UTF-8 text (missing, a directory,
    binary, a NUL in its name) is a ``UserError`` naming ``what`` it should have been."""
    try:
        return path.read_text()
    except (OSError, ValueError) as err:
        raise UserError(unreadable(path, what, err)) from None


def unreadable(path: Path, what: str, err: OSError | ValueError) -> str:
    """What to tell a user whose file ``path.read_text()`` refused with ``err``."""
    if isinstance(err, UnicodeDecodeError):
        byte = err.object[err.start]
        return f"{what} {path} is not UTF-8 text (byte {err.start}: {byte:#04x}); save it as UTF-8"
    if isinstance(err, OSError):
        return f"cannot read {what} {path}: {err.strerror}"
    return f"no {what} at {str(path)!r}: a file name has no NUL character"


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "mapping"
    return "list" if isinstance(value, list) else type(value).__name__


def _check_expansion(root: yaml.Node | None, offset: int) -> None:
    """Refuse a document whose aliases expand to more than ``MAX_YAML_VALUES`` values, or
    that contains itself (``&a [*a]``), before anything is built from it. Each distinct node
    is weighed once, so the check costs the size of the text, not of the expansion."""
    weights: dict[int, int] = {}
    open_nodes: set[int] = set()

    def weigh(node: yaml.Node) -> int:
        key = id(node)
        if key in weights:
            return weights[key]
        if key in open_nodes:
            line = node.start_mark.line + 1 + offset
            raise YamlLimitError(f"line {line}: an alias refers to a value that contains it")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(weigh(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(weigh(k) + weigh(v) for k, v in node.value)
        open_nodes.discard(key)
        if total > MAX_YAML_VALUES:
            line = node.start_mark.line + 1 + offset
            raise YamlLimitError(
                f"line {line}: aliases (*name) expand the document to more than "
                f"{MAX_YAML_VALUES:,} values, the most LabHive reads; write it with fewer aliases"
            )
        weights[key] = total
        return total

    if root is not None:
        weigh(root)


def load_yaml(text: str, *, origin: str = "", offset: int = 0) -> Any:
    """Parse ``text``; a syntax error becomes a ``YamlSyntaxError`` naming the line.

    ``offset`` shifts every line number: a document embedded as a block scalar in another file
    (OpenPAI's ``hivedscheduler: config: |``) then reports lines of the outer file.
    """
    where = f"{origin} " if origin else ""
    if len(text) > MAX_YAML_CHARS:
        raise YamlLimitError(
            f"{where}is {len(text):,} characters long; LabHive reads YAML files of at most "
            f"{MAX_YAML_CHARS:,} characters"
        )
    try:
        return yaml.load(text, Loader=_loader(offset))
    except YamlSyntaxError as err:
        raise type(err)(f"{where}{err}") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f"line {mark.line + 1 + offset}: " if mark else ""
        problem = err.problem or err.context or "cannot be parsed"
        raise YamlSyntaxError(f"{where}{line}not valid YAML: {problem}") from None
    except yaml.YAMLError as err:
        raise YamlSyntaxError(f"{where}not valid YAML: {err}") from None
