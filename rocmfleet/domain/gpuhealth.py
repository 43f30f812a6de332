"""GPU health as ``rocmfleet check`` (module ``gpu``) and a rollout's gate read it (pure).

What ``rocmfleet/scripts/gpu-health.sh`` prints, parsed and judged:

* **ECC counts since boot, per GPU**: ``amd-smi metric --ecc --json`` where the host has amd-smi
  (ROCm/amdsmi: a list of ``{"gpu": N, "ecc": {"total_correctable_count": ...,
  "total_uncorrectable_count": ..., "total_deferred_count": ...}}``; amd-smi 25+ wraps the list
  as ``{"gpu_data": [...]}``; a count the driver does not give is ``"N/A"``), else amdgpu's own
  RAS counters in sysfs (``/sys/class/drm/card<N>/device/ras/<block>_err_count``: ``ue: N`` and
  ``ce: N`` lines, Linux ``drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c``, ``amdgpu_ras_sysfs_read``),
  summed over the blocks. Uncorrectable (and deferred) errors fail a host at once: the data they
  touched was wrong. Correctable ones fail it above ``gpu_ecc_correctable_max``: a rising count
  is how an HBM stack fails (a fleet policy; AMD publishes no threshold).
* **GPU resets and hangs since boot**: the kernel log's amdgpu lines for a job timeout
  (``amdgpu_job.c``: ``ring <name> timeout``), a reset (``amdgpu_device.c``: ``GPU reset begin!``,
  ``GPU reset(N) succeeded!``/``failed``) or a RAS-triggered reset (``amdgpu_ras.c``: ``GPU reset
  for RAS``/``uncorrectable hardware error``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

#: Kernel log lines of a GPU hang or reset (amdgpu's messages, see the module docstring).
RESET_PATTERN = re.compile(
    r"amdgpu.*(ring \S+ timeout|GPU reset begin|GPU reset\(\d+\)|GPU reset (succeeded|failed)|job timed out"
    r"|uncorrectable hardware error|GPU hang)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class EccCounts:
    """One GPU's ECC error counts since boot; ``None``: not given (``N/A``)."""

    gpu: str
    correctable: int | None
    uncorrectable: int | None
    deferred: int | None = None


@dataclass(frozen=True)
class HealthRead:
    """What ``gpu-health.sh`` found: the ECC source (``amd-smi``, ``sysfs`` or ``None``), the counts,
    the kernel log's reset lines, and why the kernel log could not be read (``None`` when it was)."""

    source: str | None
    ecc: tuple[EccCounts, ...]
    resets: tuple[str, ...]
    kernel_log_error: str | None


def _count(value: object) -> int | None:
    """A count >= 0 from amd-smi's JSON; ``None`` for ``"N/A"``, absent, negative or not a count."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    return value if isinstance(value, int) and value >= 0 else None


def parse_amd_smi_ecc(text: str) -> tuple[EccCounts, ...]:
    """``amd-smi metric --ecc --json`` (either shape, module docstring) as counts per GPU.

    Raises:
        ValueError: not JSON, or no GPU entry in it.

    Example:
        >>> parse_amd_smi_ecc('[{"gpu": 3, "ecc": {"total_correctable_count": 0, "total_uncorrectable_count": 1}}]')
        (EccCounts(gpu='3', correctable=0, uncorrectable=1, deferred=None),)
    """
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    out = []
    for entry in data if isinstance(data, list) else []:
        if not isinstance(entry, dict) or "gpu" not in entry:
            continue
        found = entry.get("ecc")
        ecc: dict[str, object] = found if isinstance(found, dict) else {}
        if entry["gpu"] is None:
            continue
        out.append(
            EccCounts(
                gpu=str(entry["gpu"]),
                correctable=_count(ecc.get("total_correctable_count")),
                uncorrectable=_count(ecc.get("total_uncorrectable_count")),
                deferred=_count(ecc.get("total_deferred_count")),
            )
        )
    if not out:
        raise ValueError("amd-smi metric --ecc --json listed no GPU")
    return tuple(out)


def parse_sysfs_ras(text: str) -> tuple[EccCounts, ...]:
    """Lines ``card<N> <block> ue: <n>``, ``... ce: <n>`` and ``... de: <n>`` (deferred, newer
    kernels) (``gpu-health.sh``'s reading of ``/sys/class/drm/card<N>/device/ras/<block>_err_count``),
    summed per card."""
    counts: dict[str, dict[str, int]] = {"ue": {}, "ce": {}, "de": {}}
    for line in text.splitlines():
        match = re.fullmatch(r"(card\d+) (\S+) (ue|ce|de): *(\d+)", line.strip())
        if not match:
            continue
        card, _block, kind, value = match.groups()
        counts[kind][card] = counts[kind].get(card, 0) + int(value)
    cards = sorted(set().union(*counts.values()), key=lambda c: int(c[4:]))
    ue, ce, de = counts["ue"], counts["ce"], counts["de"]
    return tuple(EccCounts(gpu=c, correctable=ce.get(c), uncorrectable=ue.get(c), deferred=de.get(c)) for c in cards)


def parse_health(stdout: str) -> HealthRead:
    """``gpu-health.sh``'s output: sections ``== ecc amd-smi``, ``== ecc sysfs`` or ``== ecc none``,
    then ``== kernel`` (its amdgpu reset lines) or ``== kernel unreadable: <why>``.

    Raises:
        ValueError: amd-smi's ECC JSON cannot be read.
    """
    sections: dict[str, list[str]] = {}
    heads: dict[str, str] = {}
    current = ""
    for line in stdout.splitlines():
        if line.startswith("== "):
            word, _, rest = line[3:].partition(" ")
            current = word
            heads[word] = rest.strip()
            sections[word] = []
        elif current:
            sections[current].append(line)
    source = heads.get("ecc") or None
    body = "\n".join(sections.get("ecc", []))
    ecc: tuple[EccCounts, ...] = ()
    if source == "amd-smi":
        ecc = parse_amd_smi_ecc(body)
    elif source == "sysfs":
        ecc = parse_sysfs_ras(body)
    else:
        source = None
    kernel = heads.get("kernel", "unreadable: not read")
    error = kernel.removeprefix("unreadable:").strip() if kernel.startswith("unreadable") else None
    resets = tuple(line for line in sections.get("kernel", []) if RESET_PATTERN.search(line))
    return HealthRead(source, ecc, resets, error)


def ecc_problems(counts: tuple[EccCounts, ...], correctable_max: int) -> list[str]:
    """One line per GPU whose ECC counts fail it: any uncorrectable or deferred error, or more than
    ``correctable_max`` correctable ones (``gpu_ecc_correctable_max``).

    Example:
        >>> ecc_problems((EccCounts("3", 0, 1),), 100)
        ['GPU 3: 1 uncorrectable ECC error(s) since boot']
    """
    problems = []
    for c in counts:
        said = []
        if c.uncorrectable:
            said.append(f"{c.uncorrectable} uncorrectable ECC error(s)")
        if c.deferred:
            said.append(f"{c.deferred} deferred ECC error(s)")
        if c.correctable is not None and c.correctable > correctable_max:
            said.append(f"{c.correctable} correctable ECC error(s) (more than {correctable_max})")
        if said:
            name = c.gpu if c.gpu.startswith("card") else f"GPU {c.gpu}"
            problems.append(f"{name}: {', '.join(said)} since boot")
    return problems
