"""Facts about Debian packages that pyinfra's ``facts.deb``/``facts.apt`` do not give: holds."""

from __future__ import annotations

import shlex

from pyinfra.api.facts import FactBase


class HeldPackages(FactBase[list[str]]):
    """
    Which of ``packages`` apt holds (``apt-mark showhold``), sorted.

    .. code:: python

        host.get_fact(HeldPackages, packages=["docker.io"])  # ["docker.io"]
    """

    default = list

    def command(self, packages: list[str]) -> str:
        return "apt-mark showhold " + " ".join(shlex.quote(p) for p in packages) + " 2>/dev/null || true"

    def process(self, output: list[str]) -> list[str]:
        return sorted(line.strip() for line in output if line.strip())
