"""The rocm role's "nothing to do" from one recorded ``HostState`` read (``rocmfleet.plan.rocmplan``).

``tests/fixtures/rocm/lab-converged.json`` is the rocm part of a converged lab host's read
(``pyinfra -vvv`` of a no-op converge of lab-2: its ``state.sh`` lines) with the lab's ROCm data.
Each case below changes one thing of that read, as a host would differ, and the plan must say so:
a host that is not as wanted never counts as settled (the role would then skip work it owes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmfleet.domain import rocm
from rocmfleet.domain.metrics import MetricsSettings
from rocmfleet.facts.state import parse_state, state_args
from rocmfleet.plan import exporterplan, hoststate, rocmplan

CASE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "rocm" / "lab-converged.json").read_text())
DRIVER = "1:6.14.14.315000-2278356.22.04"


def settings(**changes: object) -> rocm.RocmSettings:
    return rocm.RocmSettings.model_validate({**CASE["data"], **changes})


def lines(*, drop: str = "", replace: dict[str, str] | None = None, add: list[str] | None = None) -> list[str]:
    """The recorded lines, less those holding ``drop``, with ``replace``'s substitutions, plus ``add``."""
    out = [line for line in CASE["state"] if not (drop and drop in line)]
    for old, new in (replace or {}).items():
        assert any(old in line for line in out), old
        out = [line.replace(old, new) for line in out]
    return out[:-1] + (add or []) + out[-1:]


def run(key: str, *texts: str, rc: int = 0) -> list[str]:
    return [json.dumps({"kind": "run", "key": key, "text": t}) for t in texts] + [
        json.dumps({"kind": "ran", "key": key, "rc": rc})
    ]


def differs(state: list[str], **changes: object) -> list[str]:
    return rocmplan.differs(settings(**changes), parse_state(state))


def test_the_recorded_converged_host_has_nothing_to_do():
    assert differs(lines()) == []


def test_the_query_runs_each_fact_of_the_role_once():
    runs = [name for name, _ in rocmplan.query(settings())["runs"]]  # type: ignore[attr-defined]
    assert runs == [
        rocmplan.RUN_STREAMS,
        rocmplan.RUN_SECURE_BOOT,
        rocmplan.RUN_KERNELS,
        rocmplan.RUN_DKMS,
        rocmplan.RUN_REBOOT,
        rocmplan.RUN_DRIVER,
        rocmplan.RUN_KEYRING + rocm.LEGACY_KEYRING,
    ]
    current = rocmplan.query(settings(rocm_userspace=True))["runs"]  # type: ignore[index]
    assert current[-1][0] == rocmplan.RUN_KEYRING + rocm.CURRENT_KEYRING  # type: ignore[index]


def test_what_apt_offers_is_one_apt_cache_run_for_the_rocm_and_exporter_roles():
    # apt loads its cache once per read, not once per role (issue 43); each role reads its packages
    query = hoststate.merge_queries(
        rocmplan.query(settings()), exporterplan.query(MetricsSettings(metrics_exporter=True))
    )
    args = state_args(**query)  # type: ignore[arg-type]
    runs = [args[i + 1] for i, arg in enumerate(args) if arg == "run"]
    assert runs.count(rocmplan.RUN_VERSIONS) == 1 and exporterplan.RUN_VERSIONS == rocmplan.RUN_VERSIONS
    script = args[args.index(rocmplan.RUN_VERSIONS) - 2]
    assert script == "apt-cache madison amdgpu-dkms amdgpu-dkms-firmware amdgpu-exporter 2>/dev/null || true"


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        # a run that failed, timed out or was not asked for: the operations decide
        (lines(drop='"key":"rocm-dkms-status"'), "not read: rocm-dkms-status"),
        (lines(replace={'"key":"rocm-kernels","rc":0': '"key":"rocm-kernels","rc":124'}), "not read: rocm-kernels"),
        # the driver at another version than the configured repository offers (a downgrade undone)
        (
            lines(replace={f'"version":"{DRIVER}"': '"version":"1:6.14.14.303000-1"'}),
            "amdgpu-dkms not at the version of",
        ),
        # at the version, not held: an operator's `apt-mark unhold`, or a host deployed before holds
        (
            lines(replace={'"amdgpu-dkms-firmware","status":"hi "': '"amdgpu-dkms-firmware","status":"ii "'}),
            "amdgpu-dkms-firmware not held",
        ),
        # the repository's lists predate the source file: apt knows no version from there
        (lines(drop='"key":"apt-versions","text"'), "amdgpu-dkms not at the version of"),
        # the driver purged
        (lines(drop='{"kind":"pkg","package":"amdgpu-dkms"'), "amdgpu-dkms not at the version of"),
        # a newer kernel installed that DKMS did not build for
        (
            lines(drop='"key":"rocm-kernels"', add=run(rocmplan.RUN_KERNELS, "6.18.44-fc-v1147", "9.0.0-broken")),
            "amdgpu is not installed for kernel 9.0.0-broken",
        ),
        (lines(add=run(rocmplan.RUN_REBOOT, "amdgpu driver 31.50 installed")), "a reboot is owed"),
        (lines(drop='"text":"kfd"'), "the amdgpu driver is not up"),
        (lines(replace={'"text":"same"': '"text":"differs"'}), "rocm.gpg differs from the published key"),
        # the download failed: not compared (the check says it could not tell, the deploy acts)
        (lines(drop='"text":"same"'), "not read: rocm-keyring:/etc/apt/keyrings/rocm.gpg"),
        (lines(replace={'"sha256":"db8c': '"sha256":"0000'}), "/etc/apt/sources.list.d/amdgpu.list differs"),
        (
            lines(add=run(rocmplan.RUN_STREAMS, "pkg rocm-core ii  7.2.0.70200-1")),
            "the other ROCm stream is installed",
        ),
        (lines(drop='"package":"linux-headers-'), "kernel headers missing"),
        (
            lines(replace={"sb: unknown (no mokutil)": "sb: SecureBoot enabled"}),
            "Secure Boot is enabled",
        ),
    ],
)
def test_a_host_that_differs_is_never_settled(state, reason):
    found = differs(state)
    assert any(reason in r for r in found), found


def test_changed_data_makes_a_converged_host_differ():
    older = differs(lines(), rocm_amdgpu_version="30.30")
    assert any("refusing a downgrade" in r for r in older), older
    assert any("amdgpu-dkms not at the version of" in r for r in older), older
    assert differs(lines(), rocm_amdgpu_version="30.30", rocm_allow_downgrade=True)
    assert "/etc/udev/rules.d/70-amdgpu.rules differs" in differs(lines(), rocm_device_access="groups")
    legacy = differs(lines(), rocm_version="7.2", rocm_stream="legacy")
    assert "/etc/apt/preferences.d/rocm-pin-600 differs" in legacy, legacy
    unsupported = differs(lines(), rocm_supported_kernels={"debian12": ["6.1.*"]})
    assert len(unsupported) == 1 and "6.18.44-fc-v1147" in unsupported[0], unsupported


def test_without_the_os_nothing_is_settled():
    assert differs([line for line in lines() if '"kind":"os"' not in line]) == ["OS not read"]


def test_a_keyring_is_the_same_only_with_the_published_bytes_and_mode_644(tmp_path):
    """``KeyringMatches``' command (the deploy's keyring operation and the read's run) run here, with
    a local copy standing in for the download: a keyring apt's ``_apt`` user cannot read differs."""
    import subprocess

    from rocmfleet.facts.rocm import KeyringMatches

    key, dest = tmp_path / "published.gpg", tmp_path / "rocm.gpg"
    key.write_bytes(b"\x99key")
    dest.write_bytes(b"\x99key")
    fetch = f'tmp=$(mktemp); cp {key} "$tmp"; : > "$tmp.key"'

    def probe() -> str:
        done = subprocess.run(["sh", "-c", KeyringMatches().command(fetch, str(dest))], capture_output=True, text=True)
        return KeyringMatches().process(done.stdout.splitlines())

    dest.chmod(0o644)
    assert probe() == "same"
    dest.chmod(0o600)
    assert probe() == "differs"
    dest.chmod(0o644)
    dest.write_bytes(b"\x99old")
    assert probe() == "differs"
