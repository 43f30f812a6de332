"""Signed apt repositories standing in for AMD's package servers, both ROCm streams.

Same paths, suites, package names and key layout as AMD documents
(``../shared/reference/mi300x.md`` §2), so the ROCm role runs unchanged against them:

- ``repo.radeon.com`` at the root of the served tree, signed with its key
  (``rocm/rocm.gpg.key``): the amdgpu drivers ``amdgpu/<dir>/ubuntu`` (30.20, 30.30 for the
  legacy stream, 31.50 for the current one), and the legacy userspace ``rocm/apt/<ver>`` and
  ``graphics/<ver>/ubuntu`` (7.1, 7.2), suite ``jammy`` (Debian 12 uses jammy, §2.2);
- ``stable.repo.amd.com/`` beside it, signed with a key of its own
  (``stable.repo.amd.com/rocm/gpg/packages.gpg``): the current stream's
  ``rocm/core/packages/debian12/``, suite ``stable``, with ``amdrocm10.0-gfx942`` and its
  siblings (§2.3).

A wrong key, suite, OS directory or package name fails in the lab as it would against AMD.
The packages are empty stand-ins whose maintainer scripts do what matters to a deploy:
``amdgpu-dkms`` registers its module with DKMS and builds it for the running and the newest
installed kernel, as DKMS's ``common.postinst`` does (through the lab's stand-in ``dkms``,
``tests/lab/standin/dkms``; a failed build fails the package's configuration), and asks for a
reboot (``/var/run/reboot-required``) as a kernel module package does.

The driver is strict like a real one: its ``preinst`` and ``prerm`` (``standin/driver-change.sh``)
fail an upgrade, reinstall or removal while ``gpuagent.service`` holds the GPUs ("Module amdgpu
is in use"), and log every driver change, with the state of the exporter's two units, to
``/var/log/rocmfleet-lab/driver-changes.log``.

``device-metrics-exporter/apt/<release>`` (suite ``jammy``, origin and key repo.radeon.com's, as
AMD's ``deb-package.rst``): a stand-in ``amdgpu-exporter`` with AMD's units (``gpuagent.service``,
``amd-metrics-exporter.service``) and binaries in ``/usr/local/bin`` (python3 scripts,
``standin/gpuagent`` and ``standin/amd-metrics-exporter``) that serve a recorded exposition of 8
MI300X (``standin/exporter-metrics.prom``) on the config's ``ServerPort``, with values the lab sets
in ``/var/lib/rocmfleet-lab/exporter-values.json``.

Beside it, under ``rocmfleet-lab-kernel/``, a stand-in for the distribution's kernel archive
(Debian has no packages for the machine's own kernel, which the lab hosts run):
``linux-headers-<uname -r>`` (an empty ``/lib/modules/<release>/build``) and
``linux-image-9.0.0-rocmfleet-lab-dkms-broken``, a newer kernel DKMS cannot build for.
Served over HTTP on the lab bridge by :mod:`tests.lab.services`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.lab import config

#: Legacy ROCm release -> amdgpu driver directory (30.20 <-> 7.1, 30.30 <-> 7.2; reference §2.1).
RELEASES = {"7.2": "30.30", "7.1": "30.20"}
#: Current ROCm release -> amdgpu driver directory (31.50 <-> 10.0; reference §2.1).
CURRENT_RELEASES = {"10.0": "31.50"}
SUITE = "jammy"  # Debian 12 uses the jammy suite on the legacy stream (reference §2.2)
ORIGIN = "repo.radeon.com"  # what AMD's pin matches: "Pin: release o=repo.radeon.com"
#: The current stream's server, a directory of the served tree (reference §2.3).
CURRENT_HOST = "stable.repo.amd.com"
CURRENT_PACKAGES = f"{CURRENT_HOST}/rocm/core/packages"
CURRENT_KEY = f"{CURRENT_HOST}/rocm/gpg/packages.gpg"
CURRENT_OS = "debian12"  # the lab hosts' OS directory
CURRENT_SUITE = "stable"

#: AMD's metrics exporter release the stand-in serves (ROCm/device-metrics-exporter deb-package.rst: 1.5.4).
EXPORTER_RELEASE = "1.5.4"
EXPORTER_REPO = f"device-metrics-exporter/apt/{EXPORTER_RELEASE}"
#: The stand-in package's version: the release, a build number and the Ubuntu release, as AMD's driver's.
EXPORTER_VERSION = f"{EXPORTER_RELEASE}-72~22.04"

_REBOOT_POSTINST = """#!/bin/sh
# rocmfleet lab stand-in: like DKMS's common.postinst, build the module for the running and the
# newest installed kernel (a failed build fails configuration), then ask for a reboot, like the
# real amdgpu-dkms.
set -e
if [ "$1" = configure ]; then
    dkms add -m amdgpu -v @MODVER@
    running=$(uname -r)
    newest=$( (echo "$running"; ls /boot/vmlinuz-* 2>/dev/null | sed 's|^/boot/vmlinuz-||') | sort -V | tail -1)
    for k in $(printf '%s\\n' "$running" "$newest" | sort -u); do
        dkms install -m amdgpu -v @MODVER@ -k "$k"
    done
    touch /var/run/reboot-required
    echo amdgpu-dkms >> /var/run/reboot-required.pkgs
    # The stand-in for the GPUs the module brings up: from the next boot on, as a real module.
    systemctl enable rocmfleet-lab-kfd-standin.service
fi
"""

_DKMS_PREINST = """#!/bin/sh
# rocmfleet lab stand-in: a driver upgrade or reinstall unloads amdgpu (standin/driver-change.sh).
set -e
@DRIVER_CHANGE@
driver_change preinst "$@"
"""

_DKMS_PRERM = """#!/bin/sh
# rocmfleet lab stand-in: drop the module from DKMS, as the real amdgpu-dkms does; nothing may
# hold the GPUs (standin/driver-change.sh).
set -e
@DRIVER_CHANGE@
driver_change prerm "$@"
if [ "$1" = remove ] || [ "$1" = upgrade ] || [ "$1" = deconfigure ]; then
    dkms remove -m amdgpu -v @MODVER@ --all || true
fi
if [ "$1" = remove ]; then
    systemctl disable rocmfleet-lab-kfd-standin.service || true
fi
"""

#: The machine's kernel, which every lab host runs (nspawn shares it).
KERNEL = os.uname().release
#: A newer kernel whose stand-in headers make the stand-in DKMS build fail.
BROKEN_KERNEL = "9.0.0-rocmfleet-lab-dkms-broken"
KERNEL_REPO = "rocmfleet-lab-kernel"
KERNEL_SUITE = "bookworm"


def module_version(amdgpu: str) -> str:
    """DKMS module version of the stand-in driver for an amdgpu directory (``30.30`` -> ``6.14.14-3030``)."""
    return f"6.14.14-{amdgpu.replace('.', '')}"


#: PCI buses of the 8 MI300X in ``amd-smi-list``/``amd-smi-topology`` fixtures (0000:05:00.0 ...).
MI300X_BUSES = (0x05, 0x26, 0x46, 0x65, 0x85, 0xA6, 0xC6, 0xE5)
STANDIN_DIR = Path(__file__).resolve().parent / "standin"


def _kfd_tree() -> dict[str, str]:
    """A KFD topology of one CPU node and 8 MI300X GPU nodes in SPX mode (stand-in), by path.

    Property names and values follow the real MI300X files in ``../shared/fixtures``
    (``kfd-topology-mi300x-cpx-*``: device_id 29857 = 0x74a1, gfx_target_version 90402 =
    gfx942, location_id = bus << 8). The CPU node holds this machine's CPUs, so that a
    NUMA binding computed from it is one the lab's Docker can apply: every GPU hangs off
    NUMA node 0 over PCIe (io_link type 2), and render minors are 128..135.
    """
    root = "usr/share/rocmfleet-lab/kfd/kfd/topology"
    cpus = os.cpu_count() or 1
    files = {
        f"{root}/system_properties": "platform_oem 0\nplatform_id 0\nplatform_rev 0\n",
        f"{root}/nodes/0/properties": f"cpu_cores_count {cpus}\nsimd_count 0\ncpu_core_id_base 0\ndrm_render_minor 0\n",
        f"{root}/nodes/0/gpu_id": "0\n",
    }
    for i, bus in enumerate(MI300X_BUSES, start=1):
        node = f"{root}/nodes/{i}"
        files[f"{node}/properties"] = (
            "cpu_cores_count 0\nsimd_count 1216\nnum_xcc 8\ndevice_id 29857\n"
            f"gfx_target_version 90402\nlocation_id {bus << 8}\ndomain 0\ndrm_render_minor {127 + i}\n"
            f"unique_id {0xAF54E92B0A5D5700 + i}\n"
        )
        files[f"{node}/gpu_id"] = f"{40000 + i}\n"
        files[f"{node}/io_links/0/properties"] = f"type 2\nnode_from {i}\nnode_to 0\nweight 20\n"
    return files


def _gpu_standin() -> dict[str, str]:
    """What the stand-in ``amdgpu-dkms`` installs: the boot-time stand-in for the GPUs (unit,
    device nodes, KFD tree, the Secure Boot signature check), inert until the next boot
    (``standin/kfd-standin.service``)."""
    return {
        "lib/systemd/system/rocmfleet-lab-kfd-standin.service": (STANDIN_DIR / "kfd-standin.service").read_text(),
        "usr/share/rocmfleet-lab/gpu-devices.conf": (STANDIN_DIR / "gpu-devices.tmpfiles.conf").read_text(),
        "usr/share/rocmfleet-lab/gpu-standin-loads": (STANDIN_DIR / "gpu-standin-loads").read_text(),
        **_kfd_tree(),
    }


def _amd_smi_standin() -> dict[str, str]:
    """What the stand-in ``amd-smi-lib`` installs: an ``amd-smi`` printing recorded MI300X output."""
    recorded = sorted(config.FIXTURES_DIR.glob("amd-smi-*.txt"))
    if not recorded:
        raise FileNotFoundError(
            f"no amd-smi-*.txt in {config.FIXTURES_DIR}: the lab's amd-smi stand-in prints recorded MI300X "
            "output from ../shared/fixtures beside the repository (or set ROCMFLEET_FIXTURES)"
        )
    files = {f"usr/share/rocmfleet-lab/fixtures/{src.name}": src.read_text() for src in recorded}
    files["usr/bin/amd-smi"] = (STANDIN_DIR / "amd-smi").read_text()
    return files


def _driver_script(template: str) -> str:
    """A maintainer script of the stand-in driver with ``standin/driver-change.sh`` inlined (a
    ``preinst`` runs before the package's files are unpacked: nothing of it can be sourced)."""
    return template.replace("@DRIVER_CHANGE@", (STANDIN_DIR / "driver-change.sh").read_text().rstrip("\n"))


_EXPORTER_POSTINST = """#!/bin/sh
# rocmfleet lab stand-in: systemd learns the units; enabling and starting them is the operator's
# (AMD's deb-package.rst "Step 4"), here the deploy's.
set -e
if [ "$1" = configure ]; then systemctl daemon-reload || true; fi
"""

_EXPORTER_PRERM = """#!/bin/sh
# rocmfleet lab stand-in: the units stop with the package's removal.
set -e
if [ "$1" = remove ]; then systemctl stop amd-metrics-exporter.service gpuagent.service || true; fi
"""


def _exporter_packages() -> list[tuple]:
    """``device-metrics-exporter/apt/<release>``: the stand-in ``amdgpu-exporter`` (module docstring)."""
    files = {
        "usr/local/bin/gpuagent": (STANDIN_DIR / "gpuagent").read_text(),
        "usr/local/bin/amd-metrics-exporter": (STANDIN_DIR / "amd-metrics-exporter").read_text(),
        "lib/systemd/system/gpuagent.service": (STANDIN_DIR / "gpuagent.service").read_text(),
        "lib/systemd/system/amd-metrics-exporter.service": (STANDIN_DIR / "amd-metrics-exporter.service").read_text(),
        "usr/share/rocmfleet-lab/exporter-metrics.prom": (STANDIN_DIR / "exporter-metrics.prom").read_text(),
    }
    return [("amdgpu-exporter", EXPORTER_VERSION, "python3", _EXPORTER_POSTINST, files, _EXPORTER_PRERM)]


def _driver_packages(amdgpu: str) -> list[tuple]:
    """``amdgpu/<dir>/ubuntu``: the driver and its firmware; the driver carries the GPU stand-in."""
    driver = f"1:6.14.14.{amdgpu.replace('.', '')}00-2278356.22.04"
    modver = module_version(amdgpu)
    return [
        ("amdgpu-dkms-firmware", driver, "", None),
        (
            "amdgpu-dkms",
            driver,
            "amdgpu-dkms-firmware",
            _REBOOT_POSTINST.replace("@MODVER@", modver),
            _gpu_standin(),
            _driver_script(_DKMS_PRERM).replace("@MODVER@", modver),
            _driver_script(_DKMS_PREINST),
        ),
    ]


def _packages(rocm: str, amdgpu: str) -> dict[str, list[tuple]]:
    """Per repository path of a legacy release: (package, version, depends, postinst[, files, prerm])."""
    minor = rocm.replace(".", "")
    rocm_ver = f"{rocm}.0.{minor}00000-1~22.04"
    return {
        f"amdgpu/{amdgpu}/ubuntu": _driver_packages(amdgpu),
        f"rocm/apt/{rocm}": [
            # every ROCm package depends on rocm-core, so `apt autoremove rocm-core` takes them all [R1]
            ("amd-smi-lib", rocm_ver, "rocm-core", None, _amd_smi_standin()),
            ("rocm-core", rocm_ver, "", None),
            ("rocm", rocm_ver, "rocm-core, amd-smi-lib", None),
        ],
        f"graphics/{rocm}/ubuntu": [],
    }


def _current_packages(rocm: str) -> list[tuple]:
    """The current stream's MI300X packages (reference §2.3): ``amdrocm<ver>-gfx942`` (runtime,
    with ``amd-smi``), ``amdrocm-core-dev<ver>-gfx942``, ``amdrocm-core-sdk<ver>-gfx942`` and
    ``amdrocm<ver>`` (all GPUs)."""
    version = f"{rocm}.0-4"  # rocm-installer-10.0.0-4.run (reference §2.1)
    runtime = f"amdrocm{rocm}-gfx942"
    dev = f"amdrocm-core-dev{rocm}-gfx942"
    return [
        (runtime, version, "", None, _amd_smi_standin()),
        (dev, version, runtime, None),
        (f"amdrocm-core-sdk{rocm}-gfx942", version, dev, None),
        (f"amdrocm{rocm}", version, runtime, None),
    ]


def _kernel_packages() -> list[tuple]:
    """Stand-ins for the distribution's kernel packages (see the module docstring)."""
    return [
        (
            f"linux-headers-{KERNEL}",
            "1.0-rocmfleet-lab",
            "",
            None,
            {
                f"lib/modules/{KERNEL}/build/README.rocmfleet-lab": "stand-in kernel headers\n",
                # the kernel's module signer, which DKMS runs to sign a module (Secure Boot)
                f"lib/modules/{KERNEL}/build/scripts/sign-file": (STANDIN_DIR / "sign-file").read_text(),
            },
        ),
        (
            f"linux-image-{BROKEN_KERNEL}",
            "9.0.0-1",
            "",
            None,
            {
                f"boot/vmlinuz-{BROKEN_KERNEL}": "rocmfleet lab stand-in kernel image, never booted\n",
                f"lib/modules/{BROKEN_KERNEL}/build/.rocmfleet-lab-dkms-broken": "amdgpu does not build here\n",
            },
        ),
    ]


def _recipe() -> str:
    text = repr(RELEASES) + repr(CURRENT_RELEASES) + SUITE + ORIGIN + CURRENT_PACKAGES + CURRENT_KEY
    text += _REBOOT_POSTINST + _driver_script(_DKMS_PRERM) + _driver_script(_DKMS_PREINST) + KERNEL
    text += EXPORTER_REPO + repr(_exporter_packages()) + BROKEN_KERNEL + repr(_kernel_packages())
    text += repr(sorted(_gpu_standin().items())) + repr(sorted(_amd_smi_standin().items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _build_deb(
    out: Path,
    name: str,
    version: str,
    depends: str,
    postinst: str | None,
    files: dict[str, str] | None = None,
    prerm: str | None = None,
    preinst: str | None = None,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / name
        (root / "DEBIAN").mkdir(parents=True)
        control = (
            f"Package: {name}\nVersion: {version}\nArchitecture: amd64\n"
            "Maintainer: rocmfleet lab <lab@rocmfleet.invalid>\n"
            + (f"Depends: {depends}\n" if depends else "")
            + f"Description: rocmfleet lab stand-in for AMD's {name}\n"
            " Empty package; no GPU software inside.\n"
        )
        (root / "DEBIAN/control").write_text(control)
        for script, body in (("postinst", postinst), ("prerm", prerm), ("preinst", preinst)):
            if body:
                (root / "DEBIAN" / script).write_text(body)
                (root / "DEBIAN" / script).chmod(0o755)
        for rel, text in (files or {}).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
            if "/bin/" in f"/{rel}" or rel.endswith("/scripts/sign-file"):
                (root / rel).chmod(0o755)
        doc = root / f"usr/share/doc/{name}"
        doc.mkdir(parents=True)
        (doc / "README.rocmfleet-lab").write_text("rocmfleet lab stand-in package\n")
        subprocess.run(
            [
                "dpkg-deb",
                "--root-owner-group",
                "--build",
                str(root),
                str(out / f"{name}_{version.split(':')[-1]}_amd64.deb"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )


def _gpg(gnupghome: Path, *args: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "GNUPGHOME": str(gnupghome)}
    return subprocess.run(["gpg", "--batch", "--yes", *args], check=True, env=env, **kwargs)  # type: ignore[call-overload]


def _signing_key(gnupghome: Path, uid: str) -> Path:
    """A GnuPG home holding one signing key (made once, kept in the lab's cache)."""
    has_key = gnupghome.exists() and _gpg(gnupghome, "--list-secret-keys", capture_output=True).stdout.strip()
    if not has_key:
        shutil.rmtree(gnupghome, ignore_errors=True)
        gnupghome.mkdir(mode=0o700, parents=True)
        _gpg(
            gnupghome,
            "--passphrase",
            "",
            "--quick-gen-key",
            f"{uid} <lab@rocmfleet.invalid>",
            "rsa3072",
            "sign",
            "never",
            stderr=subprocess.DEVNULL,
        )
    return gnupghome


def _publish(base: Path, debs: list[tuple], suite: str, origin: str, gnupghome: Path) -> None:
    """One apt repository at ``base``: ``pool/main`` and ``dists/<suite>`` signed with ``gnupghome``'s key.

    Several releases may share ``base`` (AMD's driver directories are per driver, not per ROCm
    release): the index then lists every package built into the pool so far.
    """
    pool = base / "pool/main"
    pool.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        _build_deb(pool, *deb)
    dist = base / f"dists/{suite}"
    binary = dist / "main/binary-amd64"
    binary.mkdir(parents=True, exist_ok=True)
    packages = subprocess.run(["apt-ftparchive", "packages", "pool"], cwd=base, check=True, capture_output=True).stdout
    (binary / "Packages").write_bytes(packages)
    for stale in ("Release", "InRelease", "Release.gpg"):
        (dist / stale).unlink(missing_ok=True)
    release = subprocess.run(
        [
            "apt-ftparchive",
            "-o",
            f"APT::FTPArchive::Release::Origin={origin}",
            "-o",
            f"APT::FTPArchive::Release::Label=rocmfleet lab stand-in ({origin})",
            "-o",
            f"APT::FTPArchive::Release::Suite={suite}",
            "-o",
            f"APT::FTPArchive::Release::Codename={suite}",
            "-o",
            "APT::FTPArchive::Release::Architectures=amd64",
            "-o",
            "APT::FTPArchive::Release::Components=main",
            "release",
            ".",
        ],
        cwd=dist,
        check=True,
        capture_output=True,
    ).stdout
    (dist / "Release").write_bytes(release)
    _gpg(gnupghome, "--clearsign", "--output", str(dist / "InRelease"), str(dist / "Release"))
    _gpg(gnupghome, "--armor", "--detach-sign", "--output", str(dist / "Release.gpg"), str(dist / "Release"))


def build() -> Path:
    """Build (once; cached by recipe) the signed stand-in repository tree.

    Returns:
        The directory to serve; ``rocm/rocm.gpg.key`` is repo.radeon.com's armored signing key
        and ``stable.repo.amd.com/rocm/gpg/packages.gpg`` the current stream's, as AMD's.
    """
    # One directory per recipe, so a lab serving an older tree from the shared cache keeps it.
    repo = config.CACHE_DIR / f"amd-repo-{_recipe()}"
    marker = repo / ".rocmfleet-lab-recipe"
    if marker.exists() and marker.read_text() == _recipe():
        return repo
    shutil.rmtree(repo, ignore_errors=True)
    legacy_key = _signing_key(config.CACHE_DIR / "amd-repo-gnupg", "rocmfleet lab stand-in for AMD ROCm repository")
    current_key = _signing_key(
        config.CACHE_DIR / "amd-stable-repo-gnupg", "rocmfleet lab stand-in for AMD stable.repo.amd.com"
    )
    (repo / "rocm").mkdir(parents=True)
    _gpg(legacy_key, "--armor", "--output", str(repo / "rocm/rocm.gpg.key"), "--export")
    (repo / CURRENT_KEY).parent.mkdir(parents=True)
    _gpg(current_key, "--armor", "--output", str(repo / CURRENT_KEY), "--export")

    trees = [
        (path, debs, SUITE, ORIGIN, legacy_key)
        for rocm, amdgpu in RELEASES.items()
        for path, debs in _packages(rocm, amdgpu).items()
    ]
    trees += [
        (f"amdgpu/{amdgpu}/ubuntu", _driver_packages(amdgpu), SUITE, ORIGIN, legacy_key)
        for amdgpu in sorted(set(CURRENT_RELEASES.values()) - set(RELEASES.values()))
    ]
    trees += [
        (f"{CURRENT_PACKAGES}/{CURRENT_OS}", _current_packages(rocm), CURRENT_SUITE, CURRENT_HOST, current_key)
        for rocm in CURRENT_RELEASES
    ]
    trees.append((EXPORTER_REPO, _exporter_packages(), SUITE, ORIGIN, legacy_key))
    trees.append((KERNEL_REPO, _kernel_packages(), KERNEL_SUITE, "rocmfleet lab kernel stand-in", legacy_key))
    for path, debs, suite, origin, gnupghome in trees:
        _publish(repo / path, debs, suite, origin, gnupghome)
    marker.write_text(_recipe())
    return repo
