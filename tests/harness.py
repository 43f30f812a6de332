"""The one stand-in for pyinfra's host and state, for the JSON cases of ``tests/operations/``
and ``tests/facts/`` (layout: ``tests/operations/README.md``).

An operation's undecorated generator (``op._inner``) runs with :class:`FakeHost` and
:class:`FakeState` set as pyinfra's context (``pyinfra.context.host``/``state``), so every module
that reads them sees the stand-ins. The host answers ``get_fact`` from the case's ``facts`` only:
a fact the case does not give fails the test, and so does a fact it gives that the operation
never asked for.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api.command import FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.context import ctx_host, ctx_state

from rocmfleet import scripts

TESTS = Path(__file__).resolve().parent
HOST_NAME = "gpu-1"


def fact_name(fact: type) -> str:
    """``rocm.SecureBoot`` for ``rocmfleet.facts.rocm.SecureBoot``; ``pyinfra.server.LinuxDistribution``
    for pyinfra's own facts."""
    module = fact.__module__
    for prefix, shown in (("rocmfleet.facts.", ""), ("pyinfra.facts.", "pyinfra.")):
        if module.startswith(prefix):
            return f"{shown}{module.removeprefix(prefix)}.{fact.__name__}"
    return f"{module}.{fact.__name__}"


def fact_class(name: str) -> type:
    """The fact class :func:`fact_name` names."""
    module, _, cls = name.rpartition(".")
    if module.startswith("pyinfra."):
        return getattr(importlib.import_module(f"pyinfra.facts.{module.removeprefix('pyinfra.')}"), cls)
    return getattr(importlib.import_module(f"rocmfleet.facts.{module}"), cls)


def fact_arguments(fact: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The arguments a fact is asked with, as a case's ``facts`` keys them: every argument of the
    fact's ``command`` (the defaults of those not given included) as ``name=value``, sorted by name,
    joined by ``,``; a string value as it is, any other as JSON: ``certificate=/x,key=null``,
    ``packages=["docker.io"]``; a dataclass or pydantic model as its fields (:func:`jsonable`):
    ``files={"directory": ..., "live": {...}}``. Empty for a fact asked without arguments."""
    if not args and not kwargs:
        return ""
    called = inspect.getcallargs(fact().command, *args, **kwargs)  # a wrong argument name raises
    called.pop("self", None)
    return ",".join(
        f"{name}={value if isinstance(value, str) else json.dumps(jsonable(value), sort_keys=True, default=str)}"
        for name, value in sorted(called.items())
    )


class FakeConfig:
    """pyinfra's ``state.config``, as far as ``files.put`` reads it: no ``--diff``."""

    DIFF = False


class FakeState:
    """pyinfra's ``state``, as far as the operations (and pyinfra's ``files`` operations they call) read it."""

    def __init__(self, executing: bool) -> None:
        self.is_executing = executing
        self.config = FakeConfig()
        self.cwd = None


class FakeHost:
    """pyinfra's ``host``: answers ``get_fact`` from a case's ``facts``, records noops.

    ``facts`` maps a fact's name (:func:`fact_name`) to its value; a fact asked with arguments
    maps instead to ``{arguments: value}`` (:func:`fact_arguments`). A value
    ``{"$output": [lines]}`` is what the fact's own ``process`` makes of those lines (for facts
    whose value is no JSON, such as ``rocm.RocmOnHost``); its items may be ``{"$file": path}``
    (:func:`output_lines`), so a recorded machine output is read where it is.
    """

    name = HOST_NAME
    print_prefix = f"[{HOST_NAME}] "
    #: pyinfra's global arguments of the operation running (``files.put`` reads ``_temp_dir``): none.
    current_op_global_arguments: dict[str, Any] = {}

    def __init__(self, facts: dict[str, Any]) -> None:
        self.facts = facts
        self.asked: dict[str, set[str]] = {}
        self.noops: list[str] = []

    def get_temp_filename(self, hash_key: str, temp_directory: str | None = None) -> str:  # noqa: ARG002
        """A fixed name per ``hash_key`` (pyinfra's is a hash under ``_temp_dir``): uploads are
        rendered without it (:func:`render_command`)."""
        return f"/tmp/pyinfra-{hash_key}"

    def get_fact(self, fact: type, *args: Any, **kwargs: Any) -> Any:
        name, arguments = fact_name(fact), fact_arguments(fact, args, kwargs)
        if name not in self.facts:
            pytest.fail(f"the operation asked for the fact {name}, which the case does not give", pytrace=False)
        value = self.facts[name]
        if arguments:
            if not isinstance(value, dict) or arguments not in value:
                pytest.fail(f"the operation asked for {name} with {arguments}, which the case does not give")
            value = value[arguments]
        self.asked.setdefault(name, set()).add(arguments)
        if isinstance(value, dict) and set(value) == {"$output"}:
            return process(fact(), output_lines(value["$output"]))
        return value

    def noop(self, message: str) -> None:
        self.noops.append(message)

    def unasked(self) -> list[str]:
        """The facts (and arguments) the case gives that the operation never asked for."""
        left = [name for name in self.facts if name not in self.asked]
        for name, arguments in self.asked.items():
            if arguments != {""}:
                left += [f"{name} with {a}" for a in self.facts[name] if a not in arguments]
        return sorted(left)


@contextmanager
def as_pyinfra(host: FakeHost, state: FakeState) -> Iterator[None]:
    """``host`` and ``state`` as pyinfra's context for the ``with`` block."""
    with ctx_host.use(host), ctx_state.use(state):
        yield


def jsonable(value: Any) -> Any:
    """``value`` as JSON would give it back: dataclasses as dicts, tuples as lists, sets sorted."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        return jsonable(value.model_dump())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def script_texts() -> dict[str, str]:
    """``{quoted text: "<rocmfleet/scripts/NAME>"}`` for every script under ``rocmfleet/scripts/``."""
    names = sorted(p.name for p in (Path(scripts.__file__).parent).iterdir() if p.suffix in (".sh", ".py", ".awk"))
    return {shlex.quote(scripts.text(name)): f"<rocmfleet/scripts/{name}>" for name in names if name != "__init__.py"}


def render_text(text: str) -> str:
    """A command's text with each rocmfleet script's quoted text (:func:`rocmfleet.scripts.command`)
    shown as ``<rocmfleet/scripts/NAME>``: ``sh -c <rocmfleet/scripts/docker-restart.sh> docker-restart.sh 300``."""
    for quoted, shown in script_texts().items():
        text = text.replace(quoted, shown)
    return text


def render_command(command: Any) -> Any:
    """A yielded command as a case's ``commands`` lists it.

    - a :class:`StringCommand` (or a plain string): its text, ``str(command)``, with the text of a
      rocmfleet script shown as ``<rocmfleet/scripts/NAME>`` (:func:`render_text`);
    - a :class:`FunctionCommand`: ``{"function": "module.name", "args": [...]}`` (plus ``"kwargs"``
      when it has any); :func:`rocmfleet.operations.fail.host_failure` is
      ``{"function": "rocmfleet.operations.fail._fail", "args": ["rocmfleet: ..."]}``;
    - a command with connector arguments (``_stdin``, ...): ``{"command": text, "connector_arguments": {...}}``;
    - a :class:`FileUploadCommand` of an in-memory file (``files.put`` of a ``StringIO``, a secret's
      ``BytesIO``): ``{"upload": dest, "content": text}``;
    - any other command: ``{"type": class name, "repr": repr(command)}``.
    """
    if isinstance(command, FunctionCommand):
        rendered: dict[str, Any] = {
            "function": f"{command.function.__module__}.{command.function.__name__}",
            "args": jsonable(list(command.args)),
        }
        if command.kwargs:
            rendered["kwargs"] = jsonable(command.kwargs)
        return rendered
    if isinstance(command, FileUploadCommand) and hasattr(command.src, "getvalue"):
        content = command.src.getvalue()
        return {"upload": command.dest, "content": content.decode() if isinstance(content, bytes) else content}
    if isinstance(command, (str, StringCommand)):
        connector = getattr(command, "connector_arguments", None)
        text = render_text(str(command))
        return {"command": text, "connector_arguments": jsonable(connector)} if connector else text
    return {"type": type(command).__name__, "repr": repr(command)}


def cases(kind: str) -> list[Any]:
    """One ``pytest.param`` per ``tests/<kind>/<name>/<case>.json``, with the id ``name/case``."""
    root = TESTS / kind
    return [
        pytest.param(path, id=f"{path.parent.name}/{path.stem}")
        for path in sorted(root.glob("*/*.json"))
        if not path.name.startswith("_")
    ]


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def process(fact: Any, lines: list[str]) -> Any:
    """What pyinfra makes of a fact's output lines: ``fact.process(lines)``, or ``fact.default()``
    when there are none (``pyinfra/api/facts.py`` ``_get_fact``: ``process`` runs only on output)."""
    return fact.process(lines) if lines else fact.default()


def output_lines(output: list[Any]) -> list[str]:
    """A fact case's ``output``: its lines, each ``{"$file": path}`` replaced by the lines of that file
    (``path`` relative to the project's root, such as ``../shared/fixtures/...``: the real machine
    outputs are read where they are, never copied)."""
    lines: list[str] = []
    for item in output:
        if isinstance(item, dict):
            lines += (TESTS.parent / item["$file"]).read_text().splitlines()
        else:
            lines.append(item)
    return lines
