"""Fail a vLLM start, with a clear message, while another process holds memory on its GPUs.

Runs on the host, before the container is created (``vllm-unit.sh run``), as
``python3 gpu_free.py INSTANCE BDF[,BDF...]``: it asks ``amd-smi process --json --gpu BDF...`` which
processes hold memory on those GPUs. Standard library only: the host's ``python3`` is the one
``amd-smi`` itself runs on (the amd-smi CLI is Python; ``amd-smi-lib`` depends on python3).

Exit status: 0 when no process holds more than :data:`MIN_HELD_BYTES` of VRAM on the GPUs, or when
the check cannot be made (no ``amd-smi``, or its output is not JSON of a form known here: a note
says the check was skipped, and vLLM's own memory check still applies); :data:`HELD_EXIT` when a
process holds them, naming GPU, pid, process name and VRAM. The unit does not restart on that
status (``RestartPreventExitStatus=``): a crash loop against a GPU that is still held only
repeats the failure.

``amd-smi process --json`` (ROCm/amdsmi ``amdsmi_cli/amdsmi_commands.py`` ``process()``, rocm-6.2;
values through ``unit_format``: ``{"value": N, "unit": "B"}`` in JSON) prints one entry per GPU::

    [{"gpu": 0, "process_list": [{"process_info": {"name": "python3", "pid": 4242,
       "memory_usage": {"gtt_mem": {"value": 0, "unit": "B"}, "cpu_mem": {...},
                        "vram_mem": {"value": 75161927680, "unit": "B"}},
       "mem_usage": {"value": 75161927680, "unit": "B"}, "usage": {...}}}]},
     {"gpu": 1, "process_list": [{"process_info": "No running processes detected"}]}]

Newer amd-smi releases wrap the list as ``{"gpu_data": [...]}``; both are read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

#: Exit status when another process holds the GPUs (EX_TEMPFAIL of sysexits.h).
HELD_EXIT = 75
#: VRAM a process may hold and still not count: amd-smi lists itself and monitoring agents open
#: the device with a few MiB; a model server holds tens of GiB.
MIN_HELD_BYTES = 512 * 1024**2

_UNITS = {"B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3}


@dataclass(frozen=True)
class Holder:
    """A process holding VRAM on a GPU: amd-smi's GPU id, pid, process name, bytes of VRAM."""

    gpu: object
    pid: object
    name: str
    vram_bytes: int


def _bytes(value: Any) -> int | None:
    """``{"value": N, "unit": "B"}``, a number of bytes, or ``"70.0 GB"`` -> bytes; ``None`` if unknown."""
    number: Any  # float() below refuses what is not a number (TypeError, ValueError)
    if isinstance(value, dict):
        number, unit = value.get("value"), str(value.get("unit", "B"))
    elif isinstance(value, int | float):
        number, unit = value, "B"
    elif isinstance(value, str) and value.strip():
        number, _, unit = value.strip().partition(" ")
        unit = unit or "B"
    else:
        return None
    try:
        return int(float(number) * _UNITS[unit.strip().upper()])
    except (KeyError, TypeError, ValueError):
        return None


def holders(report: Any, min_bytes: int = MIN_HELD_BYTES) -> list[Holder]:
    """The processes in ``amd-smi process --json`` output (parsed) that hold more than ``min_bytes``
    of VRAM.

    Raises:
        ValueError: ``report`` is not of a form described in the module docstring.
    """
    if isinstance(report, dict) and isinstance(report.get("gpu_data"), list):
        report = report["gpu_data"]
    if not isinstance(report, list):
        raise ValueError("amd-smi process --json: expected a list of GPUs")
    found = []
    for gpu in report:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("process_list", []), list):
            raise ValueError("amd-smi process --json: a GPU entry without a process_list")
        for entry in gpu.get("process_list", []):
            info = entry.get("process_info") if isinstance(entry, dict) else None
            if not isinstance(info, dict):
                continue  # "No running processes detected"
            memory: dict[str, Any] = info["memory_usage"] if isinstance(info.get("memory_usage"), dict) else {}
            vram = _bytes(memory.get("vram_mem"))
            if vram is None:
                vram = _bytes(info.get("mem_usage"))
            if vram is not None and vram > min_bytes:
                found.append(Holder(gpu.get("gpu"), info.get("pid"), str(info.get("name", "?")), vram))
    return found


def message(instance: str, bdfs: list[str], found: list[Holder]) -> str:
    """What the unit's journal says when the GPUs are held."""
    who = "; ".join(f"GPU {h.gpu}: pid {h.pid} ({h.name}) holds {h.vram_bytes / 1024**3:.1f} GiB VRAM" for h in found)
    return (
        f"rocmfleet: vLLM instance {instance} not started: its GPUs ({', '.join(bdfs)}) are still held by another "
        f"process: {who}. Stop that process (or wait for it to exit), then `systemctl start vllm-{instance}`; "
        "the unit does not retry on its own."
    )


def main(argv: list[str]) -> int:
    """``gpu_free.py INSTANCE BDF[,BDF...]``: see the module docstring for the exit status."""
    instance, bdfs = argv[0], [bdf for arg in argv[1:] for bdf in arg.split(",") if bdf]
    if not bdfs:
        return 0
    amd_smi = shutil.which("amd-smi")
    if amd_smi is None:
        print("rocmfleet: amd-smi not found: GPU memory check skipped", file=sys.stderr)
        return 0
    try:
        proc = subprocess.run(
            [amd_smi, "process", "--json", "--gpu", *bdfs], capture_output=True, text=True, timeout=60
        )
        if proc.returncode != 0:
            raise ValueError(f"status {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}")
        found = holders(json.loads(proc.stdout))
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        print(f"rocmfleet: amd-smi process could not be read ({exc}): GPU memory check skipped", file=sys.stderr)
        return 0
    if found:
        print(message(instance, bdfs, found), file=sys.stderr)
        return HELD_EXIT
    print(f"rocmfleet: GPUs {', '.join(bdfs)} hold no other process's memory", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
