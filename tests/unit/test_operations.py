"""Every operation case of ``tests/operations/<module.op>/<case>.json`` (layout: ``tests/operations/README.md``).

A case runs ``rocmfleet.operations.<module>.<op>._inner(*args, **kwargs)`` with the one stand-in host of
:mod:`tests.harness` answering the case's ``facts``, and compares the commands it yields
(:func:`tests.harness.render_command`), its noop messages, the warnings it logs and the exception it
raises with the case's ``commands``, ``noop_description``, ``warnings`` and ``exception``.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

import pytest

from rocmfleet.config.settings import HostConfig, host_config
from rocmfleet.config.vault import Secret
from rocmfleet.domain import hfmodel, vllmfiles
from rocmfleet.domain.lastgood import LastGoodFiles
from rocmfleet.domain.readiness import ReadyProbe
from rocmfleet.operations.vllm import Placed
from rocmfleet.plan import instance as plan_instance
from rocmfleet.plan import model
from rocmfleet.plan.swap import WaitTarget
from tests.harness import FakeHost, FakeState, as_pyinfra, cases, load, render_command


def _config(data: dict[str, Any]) -> HostConfig:
    """A host's HostConfig from its data (a vLLM profile added unless given)."""
    return host_config({"vllm_profile": "llama-4-scout", **data})


def _last_good_files(value: str | dict[str, Any]) -> LastGoodFiles:
    """An instance's name: its files as the role has them (``plan.instance.last_good_of``); else the fields."""
    return plan_instance.last_good_of(value) if isinstance(value, str) else LastGoodFiles(**value)


def _wait_target(data: dict[str, Any]) -> WaitTarget:
    """A WaitTarget from its fields; ``unit``, ``container`` and ``files`` default to the instance's own
    (``domain.vllmfiles.layout`` of ``name``), ``ready_probe`` is the probe's fields."""
    names = vllmfiles.layout(data["name"])
    fields = {"unit": names.unit, "container": names.container, "files": data["name"], **data}
    fields["files"] = _last_good_files(fields["files"])
    if fields.get("ready_probe") is not None:
        fields["ready_probe"] = ReadyProbe(**fields["ready_probe"])
    return WaitTarget(**fields)


#: Tagged arguments: ``{"$tag": value}`` in ``args``/``kwargs`` is ``ARGUMENTS[tag](value)``.
ARGUMENTS: dict[str, Any] = {
    # a host's RocmSettings from its data (a vLLM profile added, as every host has one)
    "rocm_settings": lambda data: _config(data).rocm,
    # a host's HostConfig from its data (a vLLM profile added unless given)
    "host_config": _config,
    # the vllm role's Placed: {"config": host data, "planned": the line the host fails with, or null}
    "placed": lambda data: Placed(_config(data["config"]), data.get("planned")),
    # a decrypted secret (prints masked)
    "secret": Secret,
    # a model to stage: {"model", "revision", "cache_dir", "image"}
    "staged": lambda data: hfmodel.Staged(**data),
    # an instance's live and last good files: its name, or {"directory", "live"}
    "last_good_files": _last_good_files,
    # an instance the deploy waits for (see _wait_target)
    "wait_target": _wait_target,
    # the host plan's items (rocmfleet.plan.model), their fields by name
    "file_plan": lambda data: model.FilePlan(**data),
    "removal": lambda data: model.Removal(**data),
    "directory_plan": lambda data: model.DirectoryPlan(**data),
    "package_plan": lambda data: model.PackagePlan(**data),
    "unit_plan": lambda data: model.UnitPlan(**data),
    # a tuple (JSON has lists only)
    "tuple": tuple,
}


def argument(value: Any) -> Any:
    """``value`` with each tagged item (``{"$tag": ...}``, also inside a list) made its type."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)).startswith("$"):
        ((tag, inner),) = value.items()
        return ARGUMENTS[tag.removeprefix("$")](inner)
    if isinstance(value, list):
        return [argument(v) for v in value]
    return value


def operation(path: Path) -> Any:
    """The operation of a case's folder ``<module>.<op>``."""
    return operation_named(path.parent.name)


def operation_named(name: str) -> Any:
    """``rocmfleet.operations.<module>.<op>`` for ``<module>.<op>``."""
    module, _, op = name.partition(".")
    return getattr(importlib.import_module(f"rocmfleet.operations.{module}"), op)


def run_earlier(earlier: list[dict[str, Any]], state: FakeState) -> None:
    """Run a case's ``earlier``: operations of the same run on the same host before the one tested
    (``{"operation": "<module>.<op>", "args", "kwargs", "facts"}``), each with its own facts and
    the one ``state``, so what an operation keeps for the rest of a run (``docker.daemon_json``'s
    planned restart) is there; their commands are not checked (their own cases do)."""
    for before in earlier:
        with as_pyinfra(FakeHost(before.get("facts", {})), state):
            op = operation_named(before["operation"])
            args = [argument(a) for a in before.get("args", [])]
            list(op._inner(*args, **{k: argument(v) for k, v in before.get("kwargs", {}).items()}))


@pytest.mark.parametrize("path", cases("operations"))
def test_operation(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    case = load(path)
    op = operation(path)
    args = [argument(a) for a in case.get("args", [])]
    kwargs = {k: argument(v) for k, v in case.get("kwargs", {}).items()}
    host, state = FakeHost(case.get("facts", {})), FakeState(case.get("executing", True))
    run_earlier(case.get("earlier", []), state)
    with caplog.at_level(logging.WARNING, logger="pyinfra"), as_pyinfra(host, state):
        if "exception" in case:
            expected = case["exception"]
            with pytest.raises(Exception) as raised:  # noqa: PT011 - the type is checked by name below
                list(op._inner(*args, **kwargs))
            assert type(raised.value).__name__ == expected["name"]
            assert str(raised.value) == expected["message"]
            return
        commands = [render_command(c) for c in op._inner(*args, **kwargs)]
    assert commands == case["commands"]
    noops = case.get("noop_description", [])
    assert host.noops == ([noops] if isinstance(noops, str) else noops)
    warnings = [r.getMessage() for r in caplog.records if r.name == "pyinfra" and r.levelno >= logging.WARNING]
    assert warnings == case.get("warnings", [])
    assert host.unasked() == [], "facts the case gives that the operation did not ask for"
