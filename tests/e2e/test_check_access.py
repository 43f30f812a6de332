"""``rocmfleet check`` through rocmfleet.fleet.connect on the deployed lab: long names, non-root users, sudo (issue 16),
and a host reached only through an SSH config entry with ProxyJump (issue 24).

Runs after test_check.py, on the converged lab. Each case writes an inventory that reuses
``inventories/lab.py``'s group data for lab-2 under another name or SSH user, and compares the
outcome of every check with the root run of the same host.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import lab_ssh, pyinfra_json, rocmfleet_cli

pytestmark = pytest.mark.lab

HOST = "lab-2"
#: A 60-character inventory name (OpenSSH multiplexing used to break from 47 with the host name
#: in the control path; rocmfleet.fleet.connect has no control path at all).
LONG_NAME = "gpu-node-0042.rack-17.row-c.west.datacenter.example-corp.net"
USER = "rocmfleet-ops"


def inventory(tmp_path, lab, name: str, **data) -> str:
    path = tmp_path / "inventory.py"
    extra = "".join(f", {key!r}: {value!r}" for key, value in data.items())
    path.write_text(
        "from inventories.lab import all as _lab_all, gpu_nodes as _lab_nodes\n"
        f'all = ([("{name}", {{"ssh_hostname": "{lab.hosts[HOST]}"}})], _lab_all[1])\n'
        f'gpu_nodes = (["{name}"], {{**_lab_nodes[1]{extra}}})\n'
    )
    return str(path)


def outcomes(tmp_path, inventory_file: str) -> tuple[int, dict[str, str], str]:
    """Exit status, {check: outcome}, and what people read."""
    report = tmp_path / "check.json"
    proc = rocmfleet_cli("check", inventory_file, "--json", str(report))
    results = json.loads(report.read_text())["results"] if report.exists() else []
    return proc.returncode, {r["check"]: r["outcome"] for r in results}, proc.stdout + proc.stderr


def ssh_ok(lab, command: str) -> None:
    proc = lab_ssh(lab, HOST, command, 600)
    assert proc.returncode == 0, f"{command}: {proc.stderr[-2000:]}"


@pytest.fixture(scope="module")
def root_outcomes(lab, tmp_path_factory) -> dict[str, str]:
    rc, found, output = outcomes(tmp_path_factory.mktemp("root"), inventory(tmp_path_factory.mktemp("inv"), lab, HOST))
    assert rc == 0, output[-4000:]
    return found


@pytest.fixture(scope="module")
def ops_user(lab):
    """A non-root login user with the lab key; passwordless sudo only while ``sudo_rule`` is written."""
    ssh_ok(
        lab,
        "command -v sudo >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sudo >/dev/null; "
        f"id {USER} >/dev/null 2>&1 || useradd -m -s /bin/sh {USER}; "
        f"install -d -m 700 -o {USER} /home/{USER}/.ssh && "
        f"install -m 600 -o {USER} /root/.ssh/authorized_keys /home/{USER}/.ssh/authorized_keys",
    )
    yield USER
    ssh_ok(lab, f"rm -f /etc/sudoers.d/{USER}; userdel -r {USER} 2>/dev/null || true")


def test_a_60_character_inventory_name_passes_like_the_host(lab, tmp_path, root_outcomes):
    assert len(LONG_NAME) == 60
    rc, found, output = outcomes(tmp_path, inventory(tmp_path, lab, LONG_NAME))
    assert rc == 0, output[-4000:]
    assert found == root_outcomes
    assert f"{LONG_NAME}  PASS  host::reachable" in output


def test_a_non_root_user_with_sudo_gets_the_same_results_as_root(lab, tmp_path, root_outcomes, ops_user):
    ssh_ok(lab, f"echo '{ops_user} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/{ops_user} && chmod 440 /etc/sudoers.d/*")
    try:
        rc, found, output = outcomes(tmp_path, inventory(tmp_path, lab, HOST, ssh_user=ops_user, _sudo=True))
    finally:
        ssh_ok(lab, f"rm -f /etc/sudoers.d/{ops_user}")
    assert rc == 0, output[-4000:]
    assert found == root_outcomes


def test_without_sudo_rights_the_checks_are_errors_not_passes(lab, tmp_path, root_outcomes, ops_user):
    rc, found, output = outcomes(tmp_path, inventory(tmp_path, lab, HOST, ssh_user=ops_user, _sudo=True))
    assert rc == 1, output[-4000:]
    assert found["host::reachable"] == "passed"
    checked = {check: outcome for check, outcome in found.items() if check != "host::reachable"}
    assert checked and set(checked.values()) <= {"error", "skipped"}, checked
    assert "error" in checked.values() and "a password is required" in output


#: The jump host of the ProxyJump case: another lab host, through which HOST is reached.
JUMP = "lab-1"


def test_a_host_behind_a_proxyjump_deploys_and_passes_check_status_and_bench(lab, tmp_path, root_outcomes):
    """Issue 24: HOST, named only by an SSH config alias whose ProxyJump is JUMP, is reached by the deploy and by
    every fleet command the same way. The inventory gives no address, user or key: all come from the config."""
    alias = "gpu-behind-bastion"
    since = lab_ssh(lab, HOST, "date +%s").stdout.strip()
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host bastion\n  HostName {lab.hosts[JUMP]}\n  User root\n  IdentityFile {lab.ssh_key}\n"
        f"  UserKnownHostsFile {lab.known_hosts}\n  StrictHostKeyChecking yes\n"
        f"Host {alias}\n  HostName {lab.hosts[HOST]}\n  User root\n  IdentityFile {lab.ssh_key}\n"
        f"  UserKnownHostsFile {lab.known_hosts}\n  ProxyJump bastion\n"
    )

    def write(name: str, **ssh: str) -> str:  # HOST's inventory data, every ssh_* key replaced by ``ssh``
        path = tmp_path / name
        path.write_text(
            "from inventories.lab import all as _lab_all, gpu_nodes as _lab_nodes\n"
            "_data = {k: v for k, v in _lab_nodes[1].items() if not k.startswith('ssh_')}\n"
            f"all = ([({alias!r}, {{}})], _lab_all[1])  # noqa: A001\n"
            f"gpu_nodes = ([{alias!r}], {{**_data, **{ssh!r}}})\n"
        )
        return str(path)

    inventory_file = write("behind.py", ssh_config_file=str(config), ssh_strict_host_key_checking="yes")

    def jumped() -> int:
        """sshd logins on HOST from JUMP's address since the test began (direct ones come from the gateway)."""
        proc = lab_ssh(lab, HOST, f"journalctl --since @{since} -o cat --no-pager")
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.count(f"Accepted publickey for root from {lab.hosts[JUMP]} port ")

    # without the SSH config the alias is no address: the failure the issue measured
    rc, found, output = outcomes(tmp_path, write("direct.py", ssh_strict_host_key_checking="yes"))
    assert rc == 1 and found.get("host::reachable") == "failed", output[-2000:]
    assert "Could not resolve hostname" in output, output[-2000:]
    assert jumped() == 0

    rc, report, stderr = pyinfra_json("deploy.py", "-y", inventory=inventory_file, timeout_s=1800)
    assert rc == 0 and report["results"]["failed_hosts"] == [], stderr[-4000:]
    changed = {op["name"]: op["success"] for op in report["results"]["operations"] if op["success"]}
    assert changed == {}, f"operations that changed something on the deployed host: {changed}"
    after_deploy = jumped()
    assert after_deploy >= 1

    rc, found, output = outcomes(tmp_path, inventory_file)
    assert rc == 0, output[-4000:]
    assert found == root_outcomes  # the same checks, the same outcomes as lab-2 reached directly
    assert f"{alias}  PASS  host::reachable" in output
    after_check = jumped()
    assert after_check > after_deploy

    proc = rocmfleet_cli("status", inventory_file, "--json", timeout_s=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(proc.stdout)["instances"]
    assert rows and {r["host"] for r in rows} == {alias} and all(r["ready"] and not r.get("error") for r in rows), rows
    after_status = jumped()
    assert after_status > after_check

    proc = rocmfleet_cli("bench", inventory_file, "--results-dir", str(tmp_path / "bench"), timeout_s=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "1 of 1 host(s) passed" and f"{alias} " in proc.stdout, proc.stdout[-3000:]
    assert jumped() > after_status
