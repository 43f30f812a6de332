"""roles/base and roles/tuning against pyinfra ``@fake`` hosts: given the one ``HostState`` read,
a converged host gets no operation, and what differs goes through pyinfra's own operation."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from rocmfleet.config.settings import host_config
from rocmfleet.domain import tuning
from rocmfleet.plan import hoststate

ROOT = Path(__file__).resolve().parents[2]
DATA = {"vllm_profile": "lab-tiny-llama", "apt_proxy": "http://10.213.0.1:8888"}
GRUB = ["GRUB_DEFAULT=0", 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"', 'GRUB_CMDLINE_LINUX="iommu=pt pci=realloc=off"']


def run(tmp_path: Path, call: str, responses: dict, data: dict | None = None, dry: bool = False) -> list[dict]:
    """Run ``call`` (e.g. ``roles.base.apply(hostdrift.role_items(plan, 'base'))``) on the fake host ``gpu-1``;
    the JSON report's operations (``dry``: the plan's, with pyinfra's ``--dry``)."""
    inventory, deploy = tmp_path / "inventory.py", tmp_path / "deploy.py"
    host = ("@fake/gpu-1", {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": responses})
    inventory.write_text(f"hosts = {[host]!r}\n")
    deploy.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(ROOT)!r})
            import rocmfleet.roles.base, rocmfleet.roles.rocm, rocmfleet.roles.tuning
            from rocmfleet import roles
            from rocmfleet.config.settings import host_config
            from rocmfleet.plan import hostdrift
            from rocmfleet.plan.build import plan_host
            config = host_config({{**{DATA!r}, **{data or {}!r}}})
            plan = plan_host("", config)
            from pyinfra.context import host
            from rocmfleet.facts.state import HostState
            from rocmfleet.plan import drift, hoststate
            from rocmfleet.converge import read_plan
            def read(role, extra):  # as converge reads and plans: the role's items on the read's OS and kernel
                items = hostdrift.role_items(plan, role)
                got = host.get_fact(HostState, **hoststate.merge_queries(drift.query(items), extra, {{"os": True}}))
                return hostdrift.role_items(read_plan(repr(config), config, got), role), got
            {call}
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pyinfra", "-y", *(["--dry"] if dry else []), "--json", str(inventory), str(deploy)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYINFRA_PROGRESS": "off"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    return report["plan"] if dry else report["results"]["operations"]


def path(p: str, content: str | None, mode: str = "644", kind: str = "file") -> str:
    if content is None:
        return json.dumps({"kind": "path", "path": p, "type": "missing"})
    sha = hashlib.sha256(content.encode()).hexdigest() if kind == "file" else ""
    return json.dumps({"kind": "path", "path": p, "type": kind, "mode": mode, "user": "root", "group": "root",
                       "sha256": sha})  # fmt: skip


def state(*lines: str) -> dict[str, list[str]]:
    return {"' state.sh ": [*lines, '{"kind":"end"}']}


def base_state(proxy: str | None = None, installed: tuple[str, ...] = ("ca-certificates", "curl", "gnupg", "iproute2")):
    settings = host_config(DATA).settings
    return state(
        path(
            "/etc/apt/apt.conf.d/80rocmfleet-lock-timeout",
            hoststate.render("templates/base/apt-lock.conf.j2", timeout_s=settings.apt_lock_timeout_s),
        ),
        path(
            "/etc/apt/apt.conf.d/80rocmfleet-proxy",
            proxy
            if proxy is not None
            else hoststate.render("templates/base/apt-proxy.conf.j2", proxy=settings.apt_proxy),
        ),
        *(json.dumps({"kind": "pkg", "package": p, "status": "ii ", "version": "1"}) for p in installed),
    )


def names(operations: list[dict]) -> list[str]:
    return [op["name"].split(" | ", 1)[1] for op in operations]


def test_base_on_a_converged_host_calls_no_operation(tmp_path):
    assert run(tmp_path, "roles.base.apply(hostdrift.role_items(plan, 'base'))", base_state()) == []


def test_base_rewrites_a_changed_proxy_file_and_installs_a_missing_package(tmp_path):
    responses = base_state(proxy='Acquire::http::Proxy "http://old:3128";\n', installed=("curl",))
    operations = run(tmp_path, "roles.base.apply(hostdrift.role_items(plan, 'base'))", responses)
    assert names(operations) == ["Configure apt proxy", "Install base packages"]


def test_base_removes_the_proxy_file_only_when_it_is_there(tmp_path):
    call = "roles.base.apply(hostdrift.role_items(plan, 'base'))"
    assert names(run(tmp_path, call, base_state(), data={"apt_proxy": None})) == ["Remove apt proxy"]
    gone = base_state(proxy=None)
    gone["' state.sh "][1] = path("/etc/apt/apt.conf.d/80rocmfleet-proxy", None)
    assert run(tmp_path, call, gone, data={"apt_proxy": None}) == []


def test_base_without_a_read_state_runs_every_operation(tmp_path):
    operations = run(tmp_path, "roles.base.apply(hostdrift.role_items(plan, 'base'))", {})
    assert names(operations) == ["Make apt wait for a held dpkg lock", "Configure apt proxy", "Install base packages"]


def tuning_state(numa: str = "0", writable: bool = True, enabled: str = "enabled") -> dict[str, list[str]]:
    settings = host_config(DATA).tuning
    commands = tuning.cpu_unit_commands(settings)
    unit = hoststate.render(
        "templates/tuning/cpu-tuning.service.j2",
        summary=", ".join(c.split(" ", 1)[1] for c in commands),
        exec_lines="\n".join(f"ExecStart={c}" for c in commands),
    )
    sysctl = hoststate.render("templates/tuning/sysctl.conf.j2", body=tuning.sysctl_conf(settings).rstrip("\n"))
    return {
        **state(
            path(tuning.SYSCTL_FILE, sysctl),
            path(tuning.CPU_UNIT_PATH, unit),
            json.dumps({"kind": "sysctl", "key": "kernel.numa_balancing", "value": numa, "writable": writable}),
            json.dumps(
                {"kind": "unit", "unit": tuning.CPU_UNIT, "load": "loaded", "active": "inactive", "enabled": enabled}
            ),
            json.dumps(
                {"kind": "os", "id": "debian", "version_id": "12", "codename": "bookworm", "kernel": "6.1.0-28-amd64"}
            ),
            json.dumps({"kind": "pkg", "package": "linux-cpupower", "status": "ii ", "version": "6.1.119-1"}),
        ),  # fmt: skip
        "( test -e /etc/default/grub": GRUB,
    }


TUNED = "roles.tuning.apply(config.tuning, *read('tuning', roles.tuning.query(config.tuning)))"
TUNE = f"assert {TUNED} == []"


def test_tuning_on_a_converged_host_calls_no_operation(tmp_path):
    assert run(tmp_path, TUNE, tuning_state()) == []


def test_tuning_applies_the_sysctl_live_only_where_it_can_be_written(tmp_path):
    assert names(run(tmp_path, TUNE, tuning_state(numa="1"))) == ["Apply kernel.numa_balancing=0 live"]
    assert run(tmp_path, TUNE, tuning_state(numa="1", writable=False)) == []


def test_tuning_enables_a_disabled_unit_and_edits_grub_that_lacks_the_parameters(tmp_path):
    responses = {
        **tuning_state(enabled="disabled"),
        "( test -e /etc/default/grub": GRUB[:2] + ['GRUB_CMDLINE_LINUX=""'],
    }
    said = f"assert {TUNED} == ['kernel command line gets iommu=pt pci=realloc=off']"
    assert names(run(tmp_path, said, responses)) == [
        "Set the kernel command line in /etc/default/grub",
        "Regenerate the GRUB configuration",
        "A reboot applies the new kernel command line",
        f"Enable {tuning.CPU_UNIT}",
    ]


def with_grub(lines: list[str]) -> dict[str, list[str]]:
    """``tuning_state`` whose HostState read carries /etc/default/grub as ``lines``, and no
    FileContents answer (the text comes with the one read)."""
    responses = tuning_state()
    del responses["( test -e /etc/default/grub"]
    responses["' state.sh "][-1:-1] = [path(tuning.GRUB_DEFAULTS, "\n".join(lines) + "\n")] + [
        json.dumps({"kind": "text", "key": tuning.GRUB_DEFAULTS, "text": line}) for line in lines
    ]
    return responses


def test_tuning_reads_grub_from_the_one_read(tmp_path):
    assert run(tmp_path, TUNE, with_grub(GRUB)) == []
    said = f"assert {TUNED} == ['kernel command line gets iommu=pt pci=realloc=off']"
    old = [*GRUB[:2], 'GRUB_CMDLINE_LINUX=""']
    # the operation reads the file itself when it executes
    operations = run(tmp_path, said, {**with_grub(old), "( test -e /etc/default/grub": old})
    assert names(operations)[0] == "Set the kernel command line in /etc/default/grub"


def rocm_state(amdgpu_list: str | None = "as-rendered", runs: tuple[str, ...] | list[str] = ()) -> dict[str, list[str]]:
    """A fake HostState answer for roles/rocm: Debian 12, its files as the role renders them, and
    ``runs`` (the role's facts as ``state.sh`` runs them: none, the read could not tell)."""
    from rocmfleet.domain import rocm, rocmtools

    settings = host_config(DATA).rocm
    target = rocm.OS_TARGETS[("debian", "12")]
    what = f"ROCm {settings.rocm_version} ({settings.rocm_stream} stream), {target.name}"
    lines = [
        path(rocm.KEYRING_DIR, "", "755", kind="dir"),
        path(rocm.LEGACY_KEYRING, "the key"),
        path(rocm.CURRENT_KEYRING, None),
    ]
    for p, body in rocm.repo_files(settings, target).items():
        if body is None:
            lines.append(path(p, None))
        elif p == rocm.AMDGPU_LIST and amdgpu_list != "as-rendered":
            lines.append(path(p, amdgpu_list))
        else:
            lines.append(path(p, hoststate.render("templates/rocm/apt-file.j2", what=what, body=body.rstrip("\n"))))
    lines += [
        path(rocm.DKMS_SIGNING_CONF, None),
        path(
            rocm.UDEV_RULE,
            hoststate.render("templates/rocm/70-amdgpu.rules.j2", body=rocmtools.udev_rule().rstrip("\n")),
        ),
        json.dumps(
            {"kind": "os", "id": "debian", "version_id": "12", "codename": "bookworm", "kernel": "6.1.0-28-amd64"}
        ),
        json.dumps({"kind": "pkg", "package": "linux-headers-6.1.0-28-amd64", "status": "ii ", "version": "6.1.119-1"}),
        *runs,
    ]
    return state(*lines)


def converged_runs() -> list[str]:
    """The role's facts as a converged Debian 12 host with the shipped defaults answers them
    (``rocmfleet.plan.rocmplan``; the outputs' shapes as ``tests/fixtures/rocm/lab-converged.json``
    recorded them on the lab)."""
    from rocmfleet.domain import rocm
    from rocmfleet.plan import rocmplan

    settings = host_config(DATA).rocm
    version = "1:6.14.14.315000-2278356.24.04"
    outputs = {
        rocmplan.RUN_STREAMS: [f"file {rocm.AMDGPU_LIST}", f"file {rocm.LEGACY_KEYRING}"]
        + [f"pkg {p} hi  {version}" for p in settings.rocm_driver_packages],
        rocmplan.RUN_SECURE_BOOT: ["sb: SecureBoot disabled"],
        rocmplan.RUN_VERSIONS: [
            f"{p} | {version} | {settings.driver_repo} noble/main amd64 Packages" for p in settings.rocm_driver_packages
        ],
        rocmplan.RUN_KERNELS: ["6.1.0-28-amd64", "6.1.0-28-amd64"],
        rocmplan.RUN_DKMS: ["amdgpu/6.14.14-3150, 6.1.0-28-amd64, x86_64: installed"],
        rocmplan.RUN_REBOOT: [],
        rocmplan.RUN_DRIVER: ["module", "kfd"],
        rocmplan.RUN_KEYRING + rocm.LEGACY_KEYRING: ["same"],
    }
    lines = [
        json.dumps({"kind": "pkg", "package": p, "status": "hi ", "version": version})  # held, as the role leaves them
        for p in settings.rocm_driver_packages
    ]
    for key, texts in outputs.items():
        lines += [json.dumps({"kind": "run", "key": key, "text": t}) for t in texts]
        lines.append(json.dumps({"kind": "ran", "key": key, "rc": 0}))
    return lines


ROCM = "roles.rocm.apply(config.rocm, *read('rocm', roles.rocm.query(config.rocm)))"


def test_rocm_on_a_converged_host_calls_no_operation(tmp_path):
    assert run(tmp_path, ROCM, rocm_state(runs=converged_runs()), dry=True) == []


def test_rocm_whose_facts_the_read_could_not_tell_runs_its_operations_and_checks(tmp_path):
    # --dry: the checks' own facts are not faked here, only which operations the role calls
    operations = run(tmp_path, ROCM, rocm_state(), dry=True)
    assert names(operations) == [
        "AMD's repo.radeon.com key",
        "Update apt lists for AMD's repositories",  # only if the key changed (_if): no command otherwise
        "Install the amdgpu driver from amdgpu/" + host_config(DATA).rocm.amdgpu_version + " and hold it",
        "Check DKMS built amdgpu for the running and newest kernels",
    ]


def test_rocm_renders_a_changed_repository_file_and_updates_apt(tmp_path):
    operations = run(tmp_path, ROCM, rocm_state(amdgpu_list="deb old\n"), dry=True)
    assert "Render /etc/apt/sources.list.d/amdgpu.list" in names(operations)
    assert "Update apt lists for AMD's repositories" in names(operations)


def test_tuning_renders_a_changed_unit_and_sysctl_file_from_its_plan_items(tmp_path):
    responses = tuning_state()
    lines = responses["' state.sh "]
    lines[0] = path(tuning.SYSCTL_FILE, "# edited by hand\n")
    lines[1] = path(tuning.CPU_UNIT_PATH, "[Unit]\n")
    assert names(run(tmp_path, TUNE, responses)) == [
        f"Render {tuning.SYSCTL_FILE}",
        f"Render {tuning.CPU_UNIT}",
        "Reload systemd units",
        f"Enable {tuning.CPU_UNIT}",
        f"Run {tuning.CPU_UNIT} now",
    ]
