"""Every fact case of ``tests/facts/<module.Fact>/<case>.json`` (layout: ``tests/operations/README.md``).

A case checks ``rocmfleet.facts.<module>.<Fact>``: ``command(**arg)`` is ``command`` (when the case gives
one; a rocmfleet script's text shown as ``<rocmfleet/scripts/NAME>``: :func:`tests.harness.render_text`),
and what pyinfra makes of the ``output`` lines (``process``, or the fact's ``default`` when there are
none: :func:`tests.harness.process`) is ``fact`` (as JSON: :func:`tests.harness.jsonable`) or raises
``exception``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import cases, fact_class, jsonable, load, output_lines, process, render_text


@pytest.mark.parametrize("path", cases("facts"))
def test_fact(path: Path) -> None:
    case = load(path)
    fact = fact_class(path.parent.name)()
    if "command" in case:
        assert render_text(fact.command(**case.get("arg", {}))) == case["command"]
    output = output_lines(case["output"])
    if "exception" in case:
        expected = case["exception"]
        with pytest.raises(Exception) as raised:  # noqa: PT011 - the type is checked by name below
            process(fact, output)
        assert type(raised.value).__name__ == expected["name"]
        if "message" in expected:
            assert str(raised.value) == expected["message"]
        return
    assert jsonable(process(fact, output)) == case["fact"]
