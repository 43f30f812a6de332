"""Reboot a host when something owes it one, and wait until it is back."""

from __future__ import annotations

import shlex
import time
from typing import TYPE_CHECKING

from pyinfra import logger
from pyinfra.api.command import FunctionCommand, StringCommand
from pyinfra.api.operation import operation
from pyinfra.connectors.util import clear_askpass_cache, remove_any_sudo_askpass_file
from pyinfra.context import host, state

from rocmfleet.facts.rocm import REBOOT_DIR, BootId, RebootReasons
from rocmfleet.operations import Commands

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.state import State


@operation(is_idempotent=False)
def require(key: str, reason: str) -> Commands:
    """
    Record that the host owes a reboot, and why (a file under ``/run/rocmfleet/``).

    + key: file name; one reason per key
    + reason: said by the reboot and by ``--dry``

    Guard it with ``_if`` on the operation whose change needs the reboot. ``/run`` is emptied by
    every boot, so the reason survives a deploy that fails before its reboot, and no longer.
    """
    yield StringCommand(
        f"mkdir -p {REBOOT_DIR} && printf '%s\\n' {shlex.quote(reason)} > {REBOOT_DIR}/{shlex.quote(key)}"
    )


@operation(is_idempotent=False)
def if_required(predicted: list[str] | None = None, timeout_s: int = 900, interval_s: float = 2) -> Commands:
    """
    Reboot the host when a reboot is owed, then wait until it is back with a new boot id.

    + predicted: reasons the deploy expects to record before this operation (said by ``--dry``;
      the decision at execution time reads only what was recorded)
    + timeout_s: how long to wait for the host to come back
    + interval_s: seconds between reconnection attempts

    The reboot is confirmed by ``/proc/sys/kernel/random/boot_id`` changing: a fresh one per
    boot, on real hosts and in containers (where uptime, which ``server.reboot`` compares, is
    the machine's). A host that owes nothing is a no-op. Use ``_serial``/``_parallel`` to bound
    how many hosts reboot at once.

    **Example:**

    .. code:: python

        reboot.if_required(name="Reboot if the driver or kernel command line changed", _parallel=1)
    """
    reasons = host.get_fact(RebootReasons)
    if not state.is_executing:
        reasons = list(dict.fromkeys(reasons + (predicted or [])))
        if reasons:
            logger.warning(f"{host.print_prefix}would reboot: {'; '.join(reasons)}")
    if not reasons:
        host.noop("no reboot needed")
        return

    before: list[str] = []

    def capture(state: State, host: Host) -> bool:  # noqa: ARG001 - pyinfra's callback signature
        remove_any_sudo_askpass_file(host)
        before.append(host.get_fact(BootId))
        logger.info(f"{host.print_prefix}rebooting: {'; '.join(reasons)}")
        return True

    yield FunctionCommand(capture, (), {})
    yield StringCommand("( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &")

    def wait(state: State, host: Host) -> bool:  # noqa: ARG001
        time.sleep(2)
        clear_askpass_cache(host)
        host.disconnect()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            host.connect(show_errors=False)
            if host.connected:
                try:
                    now = host.get_fact(BootId)
                except Exception:  # noqa: BLE001 - the host went down under us
                    now = ""
                if now and now != before[0]:
                    logger.info(f"{host.print_prefix}back after reboot (boot id {now})")
                    return True
                host.disconnect()
            time.sleep(interval_s)
        raise TimeoutError(f"{host.name}: not back with a new boot id after {timeout_s} s")

    yield FunctionCommand(wait, (), {})
