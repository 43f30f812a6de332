"""A generated site of many hosts serving many services, for measuring planning at scale (issue 43).

:func:`write_site` writes a self-contained site into a directory, laid out as an operator's:

- ``inventory.py``: every host once in ``all`` (``ssh_hostname`` ``<name>.example.internal``), the
  hosts of each service in a group of its own (``svc_<service>``, data from
  ``group_vars/svc_<service>.yml``), each rack in a group (``rack_NNN``, no data) and a
  ``canary`` group holding the first host of each service; it ends with ``check_on_load``,
  as ``inventories/prod.py`` does;
- ``group_vars/all.yml`` (``ssh_user``), ``group_vars/svc_<service>.yml`` (``vllm_profile``, and
  an image pin on every other service, as a site rolling one service's image would have);
- ``group_vars/profiles/<service>.yml``: one profile per service, each a shipped profile
  (``rocmfleet/profiles/``, taken in turn) under the service's name, with its own
  ``served_model_name`` and a digest derived from its name (not the placeholder, which would
  make every load print a warning).

Host ``i`` (0-based) serves service ``i % services`` and stands in rack ``i // rack_size``, so
every rack holds hosts of several services, as a fleet spread for failure domains does.

``python measure/site.py DIRECTORY --hosts 2000 --services 20`` writes one; ``measure/plan_scale.py``
writes and times one; ``tests/unit/test_measure_site.py`` validates a small one.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The shipped profiles the services are derived from (``rocmfleet/profiles/``).
SHIPPED = ROOT / "rocmfleet" / "profiles"
#: Hosts per rack: 20 two-socket 8-GPU servers, a common rack of MI300X nodes (about 10 kW each
#: in a high-density row); only the grouping matters here.
RACK_SIZE = 20
#: The image tag every other service pins in its group file (a roll in progress).
PINNED_TAG = "v0.33.1"


def _digest(text: str) -> str:
    """A stable, well-formed image digest derived from ``text`` (not a real image's)."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def service_names(services: int) -> list[str]:
    """The services' names: ``<shipped profile>-NN``, the shipped profiles taken in sorted order, in turn."""
    bases = sorted(p.stem for p in SHIPPED.glob("*.yml"))
    return [f"{bases[k % len(bases)]}-{k:02d}" for k in range(services)]


def _profile(service: str) -> str:
    """The profile text for ``service``: its shipped profile with name, served name and digest replaced."""
    base = service.rsplit("-", 1)[0]
    text = (SHIPPED / f"{base}.yml").read_text(encoding="utf-8")
    for key, value in (("name", service), ("served_model_name", service)):
        text, count = re.subn(rf"^{key}: .*$", f"{key}: {value}", text, count=1, flags=re.M)
        assert count == 1, f"{base}.yml: no top-level {key}"
    text, count = re.subn(r"^(\s+digest: ).*$", rf'\g<1>"{_digest(service)}"', text, count=1, flags=re.M)
    assert count == 1, f"{base}.yml: no image digest"
    return text


def _group(service: str) -> str:
    """The pyinfra group (a Python name) of ``service``'s hosts."""
    return "svc_" + re.sub(r"[^a-z0-9]", "_", service)


def write_site(directory: Path | str, hosts: int = 2000, services: int = 20, rack_size: int = RACK_SIZE) -> Path:
    """Write a site of ``hosts`` hosts serving ``services`` services into ``directory``.

    Args:
        directory: created if missing; files this function writes are overwritten.
        hosts: number of hosts (at least ``services``, so that every service has a host).
        services: number of services, one profile each.
        rack_size: hosts per rack group.

    Returns:
        The inventory file (``directory/inventory.py``).

    Raises:
        ValueError: fewer hosts than services, or a count below 1.
    """
    if services < 1 or rack_size < 1 or hosts < services:
        raise ValueError(f"need hosts >= services >= 1 and rack_size >= 1 (got {hosts}, {services}, {rack_size})")
    root = Path(directory)
    (root / "group_vars" / "profiles").mkdir(parents=True, exist_ok=True)
    names = service_names(services)
    host_names = [f"gpu-r{i // rack_size:03d}-{i % rack_size:02d}" for i in range(hosts)]
    (root / "group_vars" / "all.yml").write_text("ssh_user: root\n")
    for k, service in enumerate(names):
        (root / "group_vars" / "profiles" / f"{service}.yml").write_text(_profile(service))
        pin = f'vllm_image_tag: {PINNED_TAG}\nvllm_image_digest: "{_digest(service + PINNED_TAG)}"\n' if k % 2 else ""
        (root / "group_vars" / f"{_group(service)}.yml").write_text(f"vllm_profile: {service}\n{pin}")
    lines = [
        f'"""A generated site: {hosts} hosts, {services} services, racks of {rack_size} (measure/site.py)."""',
        "",
        "from rocmfleet.config.groupvars import load_group_vars as _load",
        "from rocmfleet.config.validate import check_on_load as _check",
        "",
        "all = (  # noqa: A001",
        "    [",
        *(f'        ("{name}", {{"ssh_hostname": "{name}.example.internal"}}),' for name in host_names),
        "    ],",
        '    _load("all"),',
        ")",
    ]
    for k, service in enumerate(names):
        members = host_names[k::services]
        lines += ["", f"{_group(service)} = (", f"    {members!r},", f'    _load("{_group(service)}"),', ")"]
    for rack in range(0, hosts, rack_size):
        lines += ["", f"rack_{rack // rack_size:03d} = {host_names[rack : rack + rack_size]!r}"]
    lines += ["", f"canary = {host_names[:services]!r}", "", "_check(__file__)", ""]
    inventory = root / "inventory.py"
    inventory.write_text("\n".join(lines))
    return inventory


def main() -> int:
    """``python measure/site.py DIRECTORY [--hosts N] [--services N] [--rack-size N]``."""
    p = argparse.ArgumentParser(description="Write a generated site (measure/site.py).")
    p.add_argument("directory", type=Path)
    p.add_argument("--hosts", type=int, default=2000)
    p.add_argument("--services", type=int, default=20)
    p.add_argument("--rack-size", type=int, default=RACK_SIZE)
    args = p.parse_args()
    try:
        print(write_site(args.directory, args.hosts, args.services, args.rack_size))
    except ValueError as exc:
        print(f"site.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
