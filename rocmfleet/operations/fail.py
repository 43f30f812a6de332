"""Failing one host with a reason, through pyinfra's own error path.

pyinfra fails a host when a command of its operation returns ``False``: the host is marked failed
(``State.fail_hosts``), the other hosts go on, and ``pyinfra`` exits non-zero naming it. An
exception raised from an operation at execution time would instead end the whole run
(``pyinfra/api/operations.py``: the greenlet's exception reaches ``_run_single_op``), and
``python.raise_exception`` prints a Python traceback as a warning. :func:`host_failure` is the
quiet form: one red line with the reason, then the host fails.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyinfra.api.command import FunctionCommand
from pyinfra.api.operation import operation

from rocmfleet.operations import Commands

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.state import State

logger = logging.getLogger("pyinfra")


def _fail(state: State, host: Host, message: str) -> bool:  # noqa: ARG001 - pyinfra passes state and host by name
    host.log_styled(message, fg="red", log_func=logger.error)
    return False


def host_failure(message: str) -> FunctionCommand:
    """A command that fails the host it runs on, logging ``message`` (one line, no traceback).

    Yield it from an operation: ``yield host_failure("rocmfleet: no GPUs in /sys/class/kfd")``.
    """
    return FunctionCommand(_fail, (message,), {})


@operation()
def failed(message: str) -> Commands:
    """
    Fail this host with ``message`` and run nothing else on it.

    + message: one line saying why (shown in red, prefixed by the host name)

    For problems found while preparing a host (its data does not validate): the deploy file
    calls this instead of raising, so the other hosts still converge.

    **Example:**

    .. code:: python

        fail.failed(name="Validate this host's data", message="rocmfleet: vllm_port: not a port")
    """
    yield host_failure(message)
