"""Read group data and profiles as YAML 1.2, refusing what YAML 1.1 readers would read otherwise.

Group files are read by people who know Ansible, whose PyYAML follows YAML 1.1: there
``022`` is the octal number 18, ``no``/``on`` are booleans, ``1_000`` and ``1:30`` are numbers.
rocmfleet reads YAML 1.2 (ruamel.yaml's safe loader), where those are the number 22 and the
strings ``no``, ``on``, ``1:30``; since the two readings differ, such a plain (unquoted)
scalar is refused with what to write instead (quote it, or write ``false``/``22``). A key given
twice in one mapping is refused too (YAML forbids it; PyYAML silently keeps the last).

Every problem of a file is reported, each with its line and key path; a file that cannot be
parsed at all (syntax, not UTF-8) is one problem. Sources: YAML 1.1 types
https://yaml.org/type/bool.html, https://yaml.org/type/int.html; YAML 1.2.2 core schema
https://yaml.org/spec/1.2.2/#1032-tag-resolution.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

#: Plain scalars YAML 1.1 reads as booleans (https://yaml.org/type/bool.html) that YAML 1.2 reads as strings.
YAML11_BOOLEANS = frozenset(["y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO"])
YAML11_BOOLEANS |= {"on", "On", "ON", "off", "Off", "OFF"}
#: Plain scalars YAML 1.1 reads as numbers (octal ``0755``, binary ``0b1``, ``1_000``, sexagesimal
#: ``1:30``, https://yaml.org/type/int.html and float.html) where YAML 1.2 differs.
_YAML11_NUMBER = re.compile(
    r"[-+]?(0[0-7_]+|0[0-9_]*[89][0-9_]*|0b[01_]+|[0-9][0-9_]*_[0-9_]*(\.[0-9_]*)?|[1-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?)"
)


@dataclass
class YamlProblem:
    """One thing wrong in a YAML file: its line (1-based, 0 when unknown), key path and message."""

    line: int
    key: str
    message: str


@dataclass
class YamlDocument:
    """A loaded file: its data (``None`` when it could not be parsed), problems and key lines."""

    data: Any
    problems: list[YamlProblem] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)  # top-level key -> line
    fatal: bool = False  # the data could not be read at all


def _yaml11_hint(text: str) -> str | None:
    """What to write instead of a plain scalar that YAML 1.1 and 1.2 read differently, or None."""
    if text in YAML11_BOOLEANS:
        boolean = "true" if text.lower() in ("y", "yes", "on") else "false"
        return (
            f"unquoted {text} is a boolean in YAML 1.1 (Ansible, PyYAML) but text in YAML 1.2: "
            f"quote it ('{text}') for text, or write {boolean} for a boolean"
        )
    if re.fullmatch(r"[-+]?0[0-7]+", text):
        return (
            f"unquoted {text} is octal {int(text, 8)} in YAML 1.1 (Ansible, PyYAML) but {int(text, 10)} in YAML 1.2: "
            f"quote it ('{text}') for text, or write the number without a leading zero"
        )
    if _YAML11_NUMBER.fullmatch(text):
        return (
            f"unquoted {text} is read differently by YAML 1.1 (Ansible, PyYAML) and YAML 1.2: "
            f"quote it ('{text}') for text, or write a plain decimal number"
        )
    if re.fullmatch(r"[-+]?[0-9]+[eE][-+]?[0-9]+", text):  # YAML 1.1's float needs a '.'
        if not math.isfinite(value := float(text)):
            meant = "infinity in YAML 1.2, more" if value > 0 else "minus infinity in YAML 1.2, less"
            return (
                f"unquoted {text} is text in YAML 1.1 (Ansible, PyYAML) but {meant} than any setting allows: write "
                f"the number meant, or quote it ('{text}') for text"
            )
        return (
            f"unquoted {text} is text in YAML 1.1 (Ansible, PyYAML) but the number {float(text):g} in YAML 1.2: "
            f"write the number in full ({float(text):.0f}), or quote it ('{text}') for text"
        )
    return None


#: Key names whose values are secrets: a YAML 1.1 hint about them never quotes the value.
_SECRET_KEY = re.compile(r"password|secret|token|api_?key", re.IGNORECASE)


def _walk(node: Node, path: str, problems: list[YamlProblem]) -> None:
    if isinstance(node, MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, ScalarNode) else "?"
            line = key_node.start_mark.line + 1
            child = f"{path}.{key}" if path else str(key)
            if key in seen:
                problems.append(
                    YamlProblem(
                        line, child, f"given twice in one mapping (lines {seen[key]} and {line}): keep one of them"
                    )
                )
            else:
                seen[key] = line
            _walk(value_node, child, problems)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, f"{path}[{index}]", problems)
    elif isinstance(node, ScalarNode) and node.style is None and not _tag(node).startswith("!"):
        hint = _yaml11_hint(node.value)
        if hint and _SECRET_KEY.search(path):
            hint = "unquoted, this value is read differently by YAML 1.1 (Ansible, PyYAML) and YAML 1.2: quote it"
        if hint:
            problems.append(YamlProblem(node.start_mark.line + 1, path, hint))


def _tag(node: Node) -> str:
    tag = node.tag
    return str(getattr(tag, "value", tag) or "")


def decode(raw: bytes) -> tuple[str | None, YamlProblem | None]:
    """``raw`` as UTF-8 text, or a problem naming the line and column of the first bad byte."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        byte = raw[exc.start : exc.start + 1].hex()
        return None, YamlProblem(line, "", f"not UTF-8 text (byte 0x{byte} at column {column}): save the file as UTF-8")


def load(text: str, tags: dict[str, Callable[[ScalarNode, str], Any]] | None = None) -> YamlDocument:
    """Parse one YAML 1.2 document, collecting every problem instead of stopping at the first.

    Args:
        text: the document.
        tags: local tags (``!vault``) -> function of (scalar node, key path) giving the value;
            it may raise ``ValueError``, which becomes a problem on that line and key.

    Returns:
        The data (duplicate keys keep the last value, but are reported), the problems, and the
        line of each top-level key. A syntax error is one fatal problem.
    """
    doc = YamlDocument(data=None)
    yaml = YAML(typ="safe", pure=True)
    yaml.allow_duplicate_keys = True

    class Constructor(SafeConstructor):
        pass

    paths: dict[int, str] = {}

    def tagged(handler: Callable[[ScalarNode, str], Any]) -> Callable[[SafeConstructor, Node], Any]:
        def construct(constructor: SafeConstructor, node: Node) -> Any:
            path = paths.get(id(node), "")
            try:
                return handler(node, path)  # type: ignore[arg-type]
            except ValueError as exc:
                doc.problems.append(YamlProblem(node.start_mark.line + 1, path, str(exc)))
                return None

        return construct

    for tag, handler in (tags or {}).items():
        Constructor.add_constructor(tag, tagged(handler))
    Constructor.add_constructor("tag:yaml.org,2002:float", _float)
    yaml.Constructor = Constructor
    try:
        node = yaml.compose(text)
    except YAMLError as exc:
        doc.fatal = True
        doc.problems.append(_syntax_problem(exc))
        return doc
    if node is None:
        doc.data = None
        return doc
    _index(node, "", paths)
    _walk(node, "", doc.problems)
    if isinstance(node, MappingNode):
        doc.lines = {k.value: k.start_mark.line + 1 for k, _v in node.value if isinstance(k, ScalarNode)}
    try:
        doc.data = yaml.constructor.construct_document(node)
    except YAMLError as exc:
        doc.fatal = True
        doc.problems.append(_syntax_problem(exc))
    return doc


class WrittenFloat(float):
    """A non-finite float and the text it was written as (``1e999``, ``.inf``), for messages
    (:func:`rocmfleet.config.errors.shown`): YAML reads ``1e999`` as infinity."""

    text: str = ""


def _float(constructor: SafeConstructor, node: Node) -> float:
    value: float = constructor.construct_yaml_float(node)
    if math.isfinite(value):
        return value
    written = WrittenFloat(value)
    written.text = str(node.value)
    return written


def _index(node: Node, path: str, paths: dict[int, str]) -> None:
    paths[id(node)] = path
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, ScalarNode) else "?"
            _index(value_node, f"{path}.{key}" if path else str(key), paths)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _index(item, f"{path}[{index}]", paths)


def _syntax_problem(exc: YAMLError) -> YamlProblem:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else 0
    what = exc.problem if isinstance(exc, MarkedYAMLError) and exc.problem else str(exc).splitlines()[0]
    return YamlProblem(line, "", f"not valid YAML: {what}")
