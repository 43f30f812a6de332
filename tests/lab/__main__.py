"""The lab: real Debian 12 hosts (systemd-nspawn) standing in for MI300X servers.

Usage (as root, from the repository root)::

    python -m tests.lab up [--hosts N]   # fresh hosts, services, image in the registry
    python -m tests.lab status
    python -m tests.lab restart lab-2    # power a host off and on again (its disk is kept)
    python -m tests.lab poweroff lab-2   # power a host off (poweron boots it again)
    python -m tests.lab down             # nothing left running, mounted or plugged in
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from tests.lab import cgroups, config, hosts, image, rootfs, services

REQUIRED_TOOLS = (
    "systemd-nspawn",
    "debootstrap",
    "tinyproxy",
    "docker-registry",
    "prometheus",
    "skopeo",
    "apt-ftparchive",
    "gpg",
    "ssh",
)


def _log(message: str) -> None:
    print(f"[lab {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _ssh_key() -> config.Path:
    key = config.RUN_DIR / "ssh" / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rocmfleet-lab", "-f", str(key)], check=True
        )
    return key


def up(count: int) -> config.LabState:
    """Bring up ``count`` fresh hosts and the lab services; returns the saved state."""
    missing = [tool for tool in REQUIRED_TOOLS if not shutil.which(tool)]
    if missing:
        sys.exit(f"lab: missing tools {', '.join(missing)} (run ./dev setup)")
    started = time.monotonic()
    down(quiet=True)
    config.RUN_DIR.mkdir(parents=True, exist_ok=True)
    services.bridge_up()
    for service in services.SERVICES[:-1]:  # the Hub (last) serves the model the image build makes
        services.start(service)
    _log("services up: apt proxy, registry, stand-in AMD repository, Prometheus")

    base = rootfs.build_base()
    key = _ssh_key()
    pubkey = key.with_suffix(".pub").read_text()
    state = config.LabState(
        ssh_key=str(key),
        known_hosts=str(config.RUN_DIR / "known_hosts"),
        apt_proxy=f"http://{config.GATEWAY}:{config.APT_PROXY_PORT}",
        registry=f"{config.GATEWAY}:{config.REGISTRY_PORT}",
        amd_repo=f"http://{config.GATEWAY}:{config.AMD_REPO_PORT}",
        hf_endpoint=f"http://{config.GATEWAY}:{config.HF_HUB_PORT}",
        prometheus=f"http://{config.GATEWAY}:{config.PROMETHEUS_PORT}",
    )
    known = []
    for index in range(1, count + 1):
        name, address = config.host_name(index), config.host_address(index)
        _tree, host_key = rootfs.make_host_tree(base, name, address, pubkey)
        known.append(f"{address} {host_key}\n")
        state.hosts[name] = address
        hosts.start(name)
    config.Path(state.known_hosts).write_text("".join(known))
    state.save()
    _log(f"booting {count} hosts")

    state.images = image.publish(state.registry, config.CACHE_DIR)
    state.save()
    services.HF_HUB_LOG.unlink(missing_ok=True)  # a fresh lab counts its own downloads
    services.start("hf-hub")
    _log("stand-in Hugging Face Hub up")
    with ThreadPoolExecutor(max_workers=count) as pool:
        list(pool.map(lambda addr: hosts.wait_for_ssh(addr, key, config.Path(state.known_hosts)), state.hosts.values()))
    _log(f"lab up in {time.monotonic() - started:.0f} s: {', '.join(f'{n}={a}' for n, a in state.hosts.items())}")
    return state


def down(quiet: bool = False) -> None:
    """Stop every host and service and remove the bridge, mounts, cgroups and host disks."""
    pattern = f"{config.HOST_PREFIX}-*"
    names = sorted({p.name for p in config.HOSTS_DIR.glob(pattern)} | {p.name for p in config.RUN_DIR.glob(pattern)})
    # Side by side: each host's orderly poweroff stops its Docker and vLLM (about 20 s a host).
    with ThreadPoolExecutor(max(1, len(names))) as pool:
        list(pool.map(hosts.stop, names))
    for service in services.SERVICES:
        services.stop(service)
    services.bridge_down()
    cgroups.remove_lab_root()
    _discard(config.HOSTS_DIR)
    shutil.rmtree(config.RUN_DIR, ignore_errors=True)
    if not quiet:
        _log("lab down")


TRASH_DIR = config.LAB_DIR / "trash"
"""Where ``down`` moves the hosts' disks; a process of its own removes them."""


def _discard(path: config.Path) -> None:
    """Move ``path`` into :data:`TRASH_DIR` and remove what is in it in a detached ``rm -rf``
    (an earlier ``down``'s leftovers too: a second ``rm`` of a tree being removed does no harm).

    A deployed host's disk holds its Docker layers (the vLLM image's 2.9 GB tree of 72,559 files and
    more): ``down`` of a deployed lab took 64-66 s, of a bare one 9 s, and ``shutil.rmtree`` of one
    copy of that tree alone 13 s (measured 2026-12-03). Nothing reads the disks again; the next
    ``up`` starts from new ones while the old ones go.
    """
    TRASH_DIR.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.rename(TRASH_DIR / f"{path.name}-{time.time_ns()}")
    leftovers = [str(entry) for entry in TRASH_DIR.iterdir()]
    if not leftovers:
        return
    subprocess.Popen(
        ["rm", "-rf", "--one-file-system", *leftovers],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def status() -> int:
    """Print what is up; exit status 0 when every host and service is running."""
    ok = True
    for service in services.SERVICES:
        running = services.is_running(service)
        ok &= running
        print(f"service {service:10} {'running' if running else 'stopped'}")
    try:
        state = config.LabState.load()
    except FileNotFoundError as exc:
        print(exc)
        return 1
    for name, address in state.hosts.items():
        running = hosts.is_running(name)
        ok &= running
        print(f"host    {name:10} {address:15} {'running' if running else 'stopped'}")
    for ref, digest in state.images.items():
        print(f"image   {ref}@{digest}")
    return 0 if ok else 1


def restart(name: str) -> None:
    """Power ``name`` off and boot it again, keeping its disk."""
    state = config.LabState.load()
    if name not in state.hosts:
        sys.exit(f"lab: no host {name!r}; hosts: {', '.join(state.hosts)}")
    hosts.stop(name)
    hosts.start(name)
    hosts.wait_for_ssh(state.hosts[name], config.Path(state.ssh_key), config.Path(state.known_hosts))
    _log(f"{name} restarted")


def power(name: str, on: bool) -> None:
    """Power ``name`` off (``on=False``: its disk is kept) or boot it again and wait for SSH."""
    state = config.LabState.load()
    if name not in state.hosts:
        sys.exit(f"lab: no host {name!r}; hosts: {', '.join(state.hosts)}")
    if not on:
        hosts.stop(name)
        _log(f"{name} powered off")
        return
    hosts.start(name)
    hosts.wait_for_ssh(state.hosts[name], config.Path(state.ssh_key), config.Path(state.known_hosts))
    _log(f"{name} powered on")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up_parser = sub.add_parser("up", help="bring up fresh hosts and the lab services")
    up_parser.add_argument("--hosts", type=int, default=3, help="number of hosts (default 3)")
    sub.add_parser("down", help="stop and remove everything but the caches")
    sub.add_parser("status", help="say what is up")
    restart_parser = sub.add_parser("restart", help="power a host off and on")
    restart_parser.add_argument("host")
    for verb, what in (("poweroff", "power a host off (its disk is kept)"), ("poweron", "boot a powered-off host")):
        sub.add_parser(verb, help=what).add_argument("host")
    args = parser.parse_args(argv)
    if args.command == "up":
        up(args.hosts)
    elif args.command == "down":
        down()
    elif args.command == "status":
        return status()
    elif args.command == "restart":
        restart(args.host)
    elif args.command in ("poweroff", "poweron"):
        power(args.host, on=args.command == "poweron")
    return 0


if __name__ == "__main__":
    sys.exit(main())
