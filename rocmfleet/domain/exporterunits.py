"""AMD's device-metrics-exporter as systemd sees it: its two units, and the commands that stop and
start them around a driver or partition change (ROCm/device-metrics-exporter
``docs/installation/deb-package.rst``, "Service Management for Driver and Partition Operations").

A leaf: the partition and parts tables say :data:`PARTITION_NOTE` without importing the role's domain.
"""

from __future__ import annotations

#: The GPU agent (it opens the GPUs) and the exporter (it asks the agent over
#: ``/var/run/gpuagent.sock`` and serves ``/metrics``); deb-package.rst.
GPUAGENT_UNIT = "gpuagent.service"
EXPORTER_UNIT = "amd-metrics-exporter.service"
#: Start order (the agent first: the exporter reads from it); stop in reverse.
UNITS = (GPUAGENT_UNIT, EXPORTER_UNIT)


def stop_command() -> str:
    """Stop the exporter, then the GPU agent, so nothing holds the GPUs (AMD, "Stop Metrics Exporter")."""
    return "systemctl stop " + " ".join(reversed(UNITS))


def stopped_command() -> str:
    """:func:`stop_command` as a driver change runs it: it succeeds when a unit is not there to stop.

    ``systemctl stop`` of a unit with no unit file (removed by hand, or a release that names it
    otherwise) fails with ``Unit X not loaded.`` after stopping the others, which failed the driver
    change it guards. What AMD asks is that neither runs: a failed stop passes when
    ``systemctl is-active`` then finds none active (it exits 0 when at least one is, systemctl(1)).
    """
    return f"{stop_command()} || ! systemctl is-active --quiet {' '.join(reversed(UNITS))}"


def start_command() -> str:
    """Start the GPU agent, then the exporter (AMD, "Step 4": enable and start)."""
    return "systemctl start " + " ".join(UNITS)


#: Said with every partition change rocmfleet asks an operator to make (deb-package.rst, "Service
#: Management for Driver and Partition Operations").
PARTITION_NOTE = (
    f"where AMD's metrics exporter is installed, stop it first (`{stop_command()}`) and start it after "
    f"(`{start_command()}`)"
)
