"""Debian 12 root filesystems for lab hosts: one cached debootstrap, one copy per host."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from tests.lab import config

#: Packages a bare server has before any deploy: systemd as PID 1, sshd, and little else.
BASE_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "libpam-systemd",
    "openssh-server",
    "iproute2",
    "ca-certificates",
    "curl",
    "gnupg",
    "sudo",
    "procps",
    "kmod",
    "iputils-ping",
    "python3",
)

STANDIN_DIR = Path(__file__).resolve().parent / "standin"


def _recipe_hash() -> str:
    return hashlib.sha256(("bookworm minbase " + ",".join(BASE_PACKAGES)).encode()).hexdigest()[:16]


def build_base() -> Path:
    """Debootstrap the shared Debian 12 tree once; later calls reuse it (about 80 s cold).

    Returns:
        The tree's path under ``CACHE_DIR``.

    Raises:
        subprocess.CalledProcessError: debootstrap failed (its log is kept beside the tree).
    """
    base = config.CACHE_DIR / "base-bookworm"
    marker = base / ".rocmfleet-lab-recipe"
    if marker.exists() and marker.read_text() == _recipe_hash():
        return base
    tmp = base.with_name(base.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)
    config.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    log = config.CACHE_DIR / "debootstrap-base.log"
    with log.open("w") as out:
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=" + ",".join(BASE_PACKAGES),
                "bookworm",
                str(tmp),
                config.DEBIAN_MIRROR,
            ],
            check=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    # A bare server has no apt lists until its first `apt-get update`.
    for lists in (tmp / "var/lib/apt/lists").glob("*_*"):
        lists.unlink()
    (tmp / ".rocmfleet-lab-recipe").write_text(_recipe_hash())
    tmp.rename(base)
    return base


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def make_host_tree(base: Path, name: str, address: str, ssh_pubkey: str) -> tuple[Path, str]:
    """Copy the base tree into a fresh host tree and give it its identity.

    Args:
        base: tree from :func:`build_base`.
        name: host name (``lab-1``).
        address: IPv4 address on the lab bridge.
        ssh_pubkey: the lab's public key, authorised for root.

    Returns:
        The host tree's path and the host's ed25519 public host key (for known_hosts).
    """
    tree = config.HOSTS_DIR / name
    shutil.rmtree(tree, ignore_errors=True)
    config.HOSTS_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", "--reflink=auto", str(base), str(tree)], check=True)

    _write(tree / "etc/hostname", name + "\n")
    _write(tree / "etc/hosts", f"127.0.0.1 localhost\n{address} {name}\n")
    _write(tree / "etc/machine-id", "")
    # Sorts before systemd's own 80-container-host0.network, so it wins.
    _write(
        tree / "etc/systemd/network/10-host0.network",
        f"[Match]\nName=host0\n\n[Network]\nAddress={address}/{config.PREFIX_LEN}\n"
        "LinkLocalAddressing=no\nIPv6AcceptRA=no\n",
    )
    wants = tree / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for unit in ("systemd-networkd.service",):
        link = wants / unit
        if not link.exists():
            link.symlink_to(f"/lib/systemd/system/{unit}")
    # No DNS in the lab: the apt proxy resolves names, everything else is an address.
    resolv = tree / "etc/resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    _write(resolv, "# lab host: no DNS server; apt goes through the lab proxy\n")

    for key in (tree / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    subprocess.run(["ssh-keygen", "-q", "-A", "-f", str(tree)], check=True)
    host_key = (tree / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
    _write(tree / "root/.ssh/authorized_keys", ssh_pubkey, mode=0o600)
    (tree / "root/.ssh").chmod(0o700)
    # Room for measure/converge.py's inventories of up to 100 names per lab host, each its own connection.
    _write(
        tree / "etc/ssh/sshd_config.d/10-lab.conf",
        "UseDNS no\nPermitRootLogin prohibit-password\nMaxStartups 400:30:800\nMaxSessions 400\n",
    )

    _install_gpu_standin(tree)
    _install_boot_standins(tree)
    return tree, f"{host_key[0]} {host_key[1]}"


def _install_gpu_standin(tree: Path) -> None:
    """The ``render`` group, as Debian 12's systemd (``sysusers.d/basic.conf``) gives every host.

    Nothing of the GPU itself: a lab host is bare, as a real one before its driver. The device
    nodes, the KFD topology and ``amd-smi`` come with the stand-in AMD packages
    (:mod:`tests.lab.amdrepo`) and appear after the driver's reboot.
    """
    _write(
        tree / "usr/lib/sysusers.d/rocmfleet-lab-gpu-standin.conf",
        "# rocmfleet lab stand-in: the group udev creates on a real host\ng render - -\n",
    )


def _install_boot_standins(tree: Path) -> None:
    """What a real server's boot chain gives the ROCm and tuning roles (stand-ins, named so).

    - ``/usr/sbin/dkms`` (where Debian's ``dkms`` puts it): a DKMS stand-in (``standin/dkms``)
      with DKMS's state layout and messages; the stand-in ``amdgpu-dkms`` calls it as the real
      one calls DKMS.
    - ``/etc/default/grub`` (Debian 12's default) and ``/usr/sbin/update-grub`` writing
      ``/boot/grub/grub.cfg``: the kernel command line is managed as on a real host, though
      nothing boots from it here.
    - an apt source for the stand-in kernel archive (:mod:`tests.lab.amdrepo`): headers for the
      machine's kernel, which the hosts run and Debian does not package, and a kernel DKMS
      cannot build for. Signed with the lab's stand-in key.
    """
    from tests.lab import amdrepo

    _write(tree / "usr/sbin/dkms", (STANDIN_DIR / "dkms").read_text(), mode=0o755)
    _write(tree / "usr/sbin/update-grub", (STANDIN_DIR / "update-grub").read_text(), mode=0o755)
    _write(tree / "etc/default/grub", (STANDIN_DIR / "grub.default").read_text())
    key = tree / "etc/apt/keyrings/rocmfleet-lab-kernel-standin.asc"
    _write(key, (amdrepo.build() / "rocm/rocm.gpg.key").read_text())
    _write(
        tree / "etc/apt/sources.list.d/rocmfleet-lab-kernel-standin.list",
        "# rocmfleet lab stand-in for the distribution's kernel packages (tests/lab/amdrepo.py)\n"
        f"deb [signed-by=/{key.relative_to(tree)}] http://{config.GATEWAY}:{config.AMD_REPO_PORT}/"
        f"{amdrepo.KERNEL_REPO} {amdrepo.KERNEL_SUITE} main\n",
    )
