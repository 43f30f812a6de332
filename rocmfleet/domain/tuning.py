"""The tuning role's logic: AMD's MI300X OS settings as data, the kernel command line, sysctl.

Source: "AMD Instinct MI300X system optimization" ([A1], ``../shared/reference/mi300x.md``
§1.1). Each setting AMD lists for inference on the host is a switch with AMD's default:

- row 5: ``kernel.numa_balancing=0``, persisted in ``/etc/sysctl.d/`` [A1][A2][A3][K3];
- rows 1-2: kernel command line ``pci=realloc=off`` and ``iommu=pt`` through ``/etc/default/grub``
  and ``update-grub`` (a reboot applies them);
- row 6: CPU idle state C2 disabled (``cpupower idle-set -d 2``) at every boot; AMD gives no
  persistence, so a systemd oneshot does it.

Rows 7-8 are container environment (the vLLM role's ``vllm_env``), row 9 is runtime-only and
"not required for new IFWI releases", rows 3 and 1.2 are BIOS settings. Settings AMD does not
document for MI300X (transparent hugepages, row 10; the CPU governor, row 11) stay off unless
the inventory asks.
"""

from __future__ import annotations

import re
import shlex
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rocmfleet.domain.tooloutput import ToolOutputError, quoted

PREFIX = "tuning_"

SYSCTL_FILE = "/etc/sysctl.d/60-rocmfleet-mi300x.conf"
GRUB_DEFAULTS = "/etc/default/grub"
CPU_UNIT = "rocmfleet-cpu-tuning.service"
CPU_UNIT_PATH = f"/etc/systemd/system/{CPU_UNIT}"

#: Parameters this role adds and therefore may remove again when a switch is turned off; any
#: other parameter on ``GRUB_CMDLINE_LINUX`` is the administrator's and is kept as it is.
MANAGED_PARAMS = ("iommu=pt", "pci=realloc=off")
MANAGED_KEYS = ("transparent_hugepage",)


class TuningSettings(BaseModel):
    """Everything the ``tuning`` role reads for one host (keys prefixed ``tuning_``)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "yes" is no boolean here

    tuning_numa_balancing_off: bool = Field(
        default=True,
        description="`kernel.numa_balancing=0`: persisted in /etc/sysctl.d and applied live (reference §1.1 row 5).",
    )
    tuning_iommu_pt: bool = Field(
        default=True, description="Kernel command line `iommu=pt` (IOMMU pass-through; reference §1.1 row 2)."
    )
    tuning_pci_realloc_off: bool = Field(
        default=True, description="Kernel command line `pci=realloc=off` (reference §1.1 row 1)."
    )
    tuning_disable_c2: bool = Field(
        default=True, description="Disable CPU idle state C2 at every boot: `cpupower idle-set -d 2` (row 6)."
    )
    tuning_transparent_hugepage: Literal["always", "madvise", "never"] | None = Field(
        default=None,
        description="`transparent_hugepage=` on the kernel command line; AMD documents none for MI300X (row 10).",
    )
    tuning_cpu_governor: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9_]+$",
        description="cpufreq governor set at every boot (`cpupower frequency-set -g`); AMD documents none (row 11).",
    )
    tuning_kernel_cmdline_extra: list[str] = Field(
        default_factory=list,
        description="More kernel parameters, e.g. `intel_iommu=on` on Intel CPUs (row 2), kept on GRUB_CMDLINE_LINUX.",
    )

    @field_validator("tuning_kernel_cmdline_extra")
    @classmethod
    def _params(cls, params: list[str]) -> list[str]:
        bad = [p for p in params if not re.fullmatch(r"[A-Za-z0-9_.,:=/+-]+", p)]
        if bad:
            raise ValueError(f"not kernel parameters (no spaces or quotes): {', '.join(map(repr, bad))}")
        return params

    @model_validator(mode="after")
    def _no_undoing(self) -> TuningSettings:
        """An extra parameter with the key of one this role sets, and another value, undoes it: the
        kernel takes the last of a repeated parameter (Documentation/admin-guide/kernel-parameters.rst),
        and the role's would come first."""
        owned = {p.split("=", 1)[0]: p for p in self._own_params()}
        undoing = [
            f"{extra} undoes {owned[key]} (tuning_{_SWITCH[key]})"
            for extra in self.tuning_kernel_cmdline_extra
            if (key := _key(extra)) in owned and extra != owned[key] and _undoes(key, extra)
        ]
        if undoing:
            raise ValueError(
                "tuning_kernel_cmdline_extra: " + "; ".join(undoing) + ": turn the switch off instead, or drop it"
            )
        return self

    def _own_params(self) -> list[str]:
        """The parameters the switches set (``tuning_kernel_cmdline_extra`` not included)."""
        params = []
        if self.tuning_iommu_pt:
            params.append("iommu=pt")
        if self.tuning_pci_realloc_off:
            params.append("pci=realloc=off")
        if self.tuning_transparent_hugepage:
            params.append(f"transparent_hugepage={self.tuning_transparent_hugepage}")
        return params

    @property
    def kernel_params(self) -> list[str]:
        """Parameters that must be on the kernel command line, in a stable order."""
        return [*self._own_params(), *self.tuning_kernel_cmdline_extra]

    @property
    def cpu_unit_needed(self) -> bool:
        return self.tuning_disable_c2 or self.tuning_cpu_governor is not None


#: The switch that owns each parameter key the role sets.
_SWITCH = {"iommu": "iommu_pt", "pci": "pci_realloc_off", "transparent_hugepage": "transparent_hugepage"}


def _key(param: str) -> str:
    """The switch key a kernel parameter sets: ``iommu.passthrough=0`` is ``iommu`` (the generic
    IOMMU option that ``iommu=pt`` also sets; Documentation/admin-guide/kernel-parameters.txt)."""
    name = param.split("=", 1)[0]
    return "iommu" if name == "iommu.passthrough" else name


def _undoes(key: str, extra: str) -> bool:
    """``pci=`` takes comma-separated options: only a ``realloc`` option undoes ``pci=realloc=off``."""
    if extra.startswith("iommu.passthrough="):
        return extra.split("=", 1)[1].lower() in ("0", "n", "no", "off")
    if key != "pci":
        return True
    return any(opt.startswith("realloc") for opt in extra.split("=", 1)[1].split(","))


def sysctl_conf(settings: TuningSettings) -> str | None:
    """Body of :data:`SYSCTL_FILE` (``None``: the file must not exist)."""
    if not settings.tuning_numa_balancing_off:
        return None
    return "kernel.numa_balancing = 0\n"


def cpu_unit_commands(settings: TuningSettings) -> list[str]:
    """``ExecStart=`` commands of the boot-time CPU unit."""
    commands = []
    if settings.tuning_disable_c2:
        commands.append("/usr/bin/cpupower idle-set -d 2")
    if settings.tuning_cpu_governor:
        commands.append(f"/usr/bin/cpupower frequency-set -g {settings.tuning_cpu_governor}")
    return commands


def cpupower_packages(distro: str, kernel: str) -> list[str]:
    """Where ``cpupower`` comes from: Debian's ``linux-cpupower``; on Ubuntu AMD names
    ``linux-tools-common`` [A1], whose wrapper runs the kernel's ``linux-tools-<release>``."""
    if distro.lower() == "ubuntu":
        return ["linux-tools-common", f"linux-tools-{kernel}"]
    return ["linux-cpupower"]


_CMDLINE = re.compile(r'^(?P<head>\s*GRUB_CMDLINE_LINUX=)(?P<value>"[^"]*"|\'[^\']*\'|\S*)(?P<tail>.*)$')


def _wanted_cmdline(current: list[str], wanted: list[str]) -> list[str]:
    wanted_keys = {p.split("=", 1)[0] for p in wanted if p.split("=", 1)[0] in MANAGED_KEYS}
    kept = [
        p
        for p in current
        if p in wanted
        or not (p in MANAGED_PARAMS or p.split("=", 1)[0] in MANAGED_KEYS or p.split("=", 1)[0] in wanted_keys)
    ]
    return kept + [p for p in wanted if p not in kept]


def edit_grub_defaults(text: str, wanted: list[str]) -> str:
    """``/etc/default/grub`` with ``GRUB_CMDLINE_LINUX`` holding every ``wanted`` parameter.

    Parameters the role manages (:data:`MANAGED_PARAMS`, :data:`MANAGED_KEYS`) that are no longer
    wanted are removed; every other parameter and line stays as it was. A file without the
    variable gets it appended. Equal input gives equal output, so a converged file is unchanged.
    """
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        match = _CMDLINE.match(line.rstrip("\n"))
        if not match:
            continue
        raw = match["value"]
        current = shlex.split(raw)[0].split() if raw else []
        new = _wanted_cmdline(current, wanted)
        if new == current:
            return text
        ending = "\n" if line.endswith("\n") else ""
        lines[index] = f'{match["head"]}"{" ".join(new)}"{match["tail"]}{ending}'
        return "".join(lines)
    if not wanted:
        return text
    prefix = "" if not text or text.endswith("\n") else "\n"
    return f'{text}{prefix}GRUB_CMDLINE_LINUX="{" ".join(wanted)}"\n'


def grub_cmdline(text: str) -> list[str]:
    """The parameters ``GRUB_CMDLINE_LINUX`` holds in ``/etc/default/grub`` (``text``), as the shell reads it.

    Raises:
        ToolOutputError: the file is empty (or was not readable), has no ``GRUB_CMDLINE_LINUX=``
            line, or its value does not parse as shell (an unclosed quote: a truncated file).
    """
    if not text.strip():
        raise ToolOutputError(f"{GRUB_DEFAULTS} is empty or could not be read")
    lines = [line for line in text.splitlines() if _CMDLINE.match(line)]
    if not lines:
        raise ToolOutputError(f"{GRUB_DEFAULTS} has no GRUB_CMDLINE_LINUX= line: {quoted(text)}")
    value = lines[-1].split("=", 1)[1]  # the shell keeps the last assignment
    try:
        words = shlex.split(value, comments=True)
    except ValueError as exc:
        raise ToolOutputError(f"{GRUB_DEFAULTS}: GRUB_CMDLINE_LINUX does not parse ({exc}): {value[:200]!r}") from None
    return " ".join(words).split()


def grub_cfg_linux_lines(text: str) -> list[list[str]]:
    """The words of each ``linux`` line of a generated ``/boot/grub/grub.cfg`` (``text``).

    Raises:
        ToolOutputError: the file is empty or holds no ``linux`` line (truncated, or not grub's).
    """
    linux = [line.split() for line in text.splitlines() if line.strip().startswith("linux")]
    if not linux:
        raise ToolOutputError(f"/boot/grub/grub.cfg holds no `linux` line: {quoted(text)}")
    return linux


def cmdline_params(cmdline: str) -> list[str]:
    """Parameters of ``/proc/cmdline`` (or a grub ``linux`` line) up to ``--``."""
    params = []
    for token in cmdline.split():
        if token == "--":
            break
        params.append(token)
    return params
