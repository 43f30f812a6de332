"""Every pyinfra operation of ``rocmfleet/operations/`` and every fact of ``rocmfleet/facts/`` has at least
one JSON case (``tests/operations/<module>.<op>/``, ``tests/facts/<module>.<Fact>/``; layout:
``tests/operations/README.md``), and every case folder names one that exists.

An operation is a function of the module decorated with pyinfra's ``@operation`` (it carries the
undecorated generator as ``_inner``); a fact is a :class:`pyinfra.api.facts.FactBase` subclass defined
in the module.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from pyinfra.api.facts import FactBase

import rocmfleet.facts
import rocmfleet.operations
from tests.harness import TESTS


def _modules(package: ModuleType) -> list[ModuleType]:
    return [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]


def operations() -> list[str]:
    """``<module>.<op>`` of every pyinfra operation under ``rocmfleet/operations/``."""
    return sorted(
        f"{module.__name__.rpartition('.')[2]}.{name}"
        for module in _modules(rocmfleet.operations)
        for name, value in vars(module).items()
        if callable(value) and hasattr(value, "_inner") and value.__module__ == module.__name__
    )


def facts() -> list[str]:
    """``<module>.<Fact>`` of every fact under ``rocmfleet/facts/``."""
    return sorted(
        f"{module.__name__.rpartition('.')[2]}.{name}"
        for module in _modules(rocmfleet.facts)
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, FactBase) and value.__module__ == module.__name__
    )


def with_cases(kind: str) -> set[str]:
    """The folders of ``tests/<kind>/`` holding at least one case (files starting with ``_`` are skipped)."""
    return {p.parent.name for p in (TESTS / kind).glob("*/*.json") if not p.name.startswith("_")}


def test_the_discovery_finds_operations_and_facts() -> None:
    assert "packages.held_at" in operations()
    assert "topology.GpuTopology" in facts()


def test_every_operation_has_a_json_case() -> None:
    missing = [name for name in operations() if name not in with_cases("operations")]
    assert missing == [], f"operations without a case in tests/operations/<module>.<op>/: {missing}"


def test_every_fact_has_a_json_case() -> None:
    missing = [name for name in facts() if name not in with_cases("facts")]
    assert missing == [], f"facts without a case in tests/facts/<module>.<Fact>/: {missing}"


def test_every_case_folder_names_an_operation_or_fact() -> None:
    stale = sorted(with_cases("operations") - set(operations())) + sorted(with_cases("facts") - set(facts()))
    assert stale == [], f"case folders naming no operation or fact (renamed or removed?): {stale}"
