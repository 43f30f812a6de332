"""Facts about GPU device files."""

from __future__ import annotations

from pyinfra.api.facts import FactBase


class DeviceGroupIds(FactBase[list[int]]):
    """
    Numeric group ids owning ``/dev/kfd`` and ``/dev/dri/renderD*``, sorted and unique.

    Containers get these with ``--group-add <gid>``: by number, because the image's
    ``/etc/group`` may lack ``render`` or number it differently. Empty when the files are
    missing (no driver loaded).

    .. code:: python

        gids = host.get_fact(DeviceGroupIds)  # [44, 992]
    """

    default = list

    def command(self) -> str:
        return "stat -c %g /dev/kfd /dev/dri/renderD* 2>/dev/null || true"

    def process(self, output: list[str]) -> list[int]:
        return sorted({int(line) for line in output if line.strip().isdigit()})
