"""pyinfra operations rocmfleet adds (one module per domain, as in ``pyinfra.operations``)."""

from __future__ import annotations

from collections.abc import Generator

from pyinfra.api.command import PyinfraCommand

#: What an operation function yields (``@operation`` takes a generator): shell commands as strings
#: and pyinfra's command objects (``StringCommand``, ``FunctionCommand``...).
Commands = Generator[str | PyinfraCommand, None, None]


def this_run(state: object) -> object:
    """The pyinfra ``State`` behind ``state`` (the ``pyinfra.state`` context proxy an operation
    module imported): the key of what an operation keeps for the rest of one run (placements,
    Docker restarts). A test's plain stand-in for ``state`` is returned as it is."""
    return getattr(state, "_get_module", lambda: state)()
