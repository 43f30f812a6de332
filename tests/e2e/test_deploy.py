"""The deploy against real lab hosts: converge, serve, placement, secrets, idempotence, reboots, teardown.

Needs root and the lab (``./dev test`` brings both); run only these with ``pytest -m lab``.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from rocmfleet.domain.topology import parse_id_list
from tests.conftest import connect, lab_inventory, lab_ssh, pyinfra_json, rocmfleet_cli
from tests.unit.conftest import every_profile

pytestmark = pytest.mark.lab

MODEL = "tiny-llama"
#: inventories/lab.py: the first host runs two instances, the others one.
FIRST_HOST_UNITS = {"vllm-tiny-llama-a.service": 8000, "vllm-tiny-llama-b.service": 8001}
OTHER_HOST_UNITS = {"vllm-lab-tiny-llama-0.service": 8000}
TOKEN = "hf_rocmfleetLabToken4242XYZ"  # the vault-encrypted stand-in token in group_vars/lab.yml


def units(lab, name: str) -> dict[str, int]:
    return FIRST_HOST_UNITS if name == sorted(lab.hosts)[0] else OTHER_HOST_UNITS


def pyinfra_deploy(*flags: str) -> tuple[int, dict, str]:
    """``pyinfra -y --json [FLAGS] inventories/lab.py deploy.py``: exit status, JSON report, stderr."""
    return pyinfra_json("deploy.py", "-y", *flags)


def complete(address: str, port: int = 8000, prompt: str = "The fleet is", timeout_s: float = 60) -> dict:
    """POST /v1/completions on ``address:port`` from this machine."""
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 8}).encode()
    request = urllib.request.Request(
        f"http://{address}:{port}/v1/completions", data=body, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        assert response.status == 200
        return json.loads(response.read())


def wait_for_completion(address: str, port: int = 8000, timeout_s: float = 900) -> dict:
    """Retry :func:`complete` until it answers or ``timeout_s`` seconds pass."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return complete(address, port)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{address}: no completion after {timeout_s} s ({exc})") from exc
            time.sleep(5)


@pytest.fixture(scope="module")
def first_deploy(lab):
    return pyinfra_deploy("-v")


def test_first_deploy_converges_every_host(lab, first_deploy):
    rc, report, stderr = first_deploy
    assert rc == 0, stderr[-4000:]
    assert report["results"]["failed_hosts"] == []
    assert report["results"]["totals"]["error"] == 0


def test_every_instance_answers_completions_from_the_machine(lab, first_deploy):
    for name, address in lab.hosts.items():
        for port in units(lab, name).values():
            answer = complete(address, port)
            assert answer["model"] == MODEL
            assert answer["choices"][0]["text"]  # random weights: any text, but some


def test_prometheus_scrapes_every_instance_and_exporter_the_deploy_listed(lab, first_deploy):
    """The deploy wrote ``metrics_targets_file`` (inventories/lab.py sets it); ``rocmfleet metrics
    targets`` lists exactly the lab's instances and exporters, as that file does; the lab's
    Prometheus (Debian's package, scraping that file) has ``up == 1`` for every one of them."""
    from tests.lab.config import METRICS_TARGETS_FILE

    proc = rocmfleet_cli("metrics", "targets", "inventories/lab.py")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    listed = json.loads(proc.stdout)
    assert json.loads(METRICS_TARGETS_FILE.read_text()) == listed
    by_job: dict[str, set[str]] = {}
    for group in listed:
        by_job.setdefault(group["labels"]["job"], set()).update(group["targets"])
    instances = {f"{address}:{port}" for name, address in lab.hosts.items() for port in units(lab, name).values()}
    exporters = {f"{address}:5000" for address in lab.hosts.values()}
    assert by_job == {"vllm": instances, "amd-device-metrics": exporters}, by_job
    deadline = time.monotonic() + 90
    while True:
        with urllib.request.urlopen(f"{lab.prometheus}/api/v1/query?query=up", timeout=10) as response:
            result = json.loads(response.read())["data"]["result"]
        up = {r["metric"]["instance"]: r["value"][1] for r in result}
        if all(up.get(t) == "1" for t in instances | exporters) or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert {t: up.get(t) for t in instances | exporters} == dict.fromkeys(instances | exporters, "1"), up


def test_units_are_active_and_run_the_image_by_digest(lab, first_deploy, ssh_config):
    digest = lab.images[f"{lab.registry}/rocmfleet-lab/vllm-cpu:0.32.0-lab.1"]
    for name, address in lab.hosts.items():
        host = connect(address, ssh_config)
        for unit in units(lab, name):
            assert host.service(unit).is_running and host.service(unit).is_enabled
            assert host.file(f"/etc/systemd/system/{unit}").contains(f"@{digest}")
            container = unit.removesuffix(".service")
            image = host.check_output("docker inspect --format '{{.Config.Image}}' %s", container)
            assert image.endswith(f"@{digest}")


def test_systemd_analyze_verify_passes_on_every_rendered_unit(lab, first_deploy, ssh_config):
    for name, address in lab.hosts.items():
        host = connect(address, ssh_config)
        for unit in units(lab, name):
            result = host.run("systemd-analyze verify /etc/systemd/system/%s", unit)
            assert result.rc == 0 and not result.stderr.strip(), result.stderr


def test_two_instances_get_disjoint_render_nodes_and_cpus_from_the_host_topology(lab, first_deploy, ssh_config):
    name, address = sorted(lab.hosts.items())[0]
    host = connect(address, ssh_config)
    devices, cpus = {}, {}
    for unit in FIRST_HOST_UNITS:
        container = unit.removesuffix(".service")
        listed = host.check_output(
            "docker inspect --format '{{range .HostConfig.Devices}}{{.PathOnHost}} {{end}}' %s", container
        )
        devices[container] = set(listed.split())
        # What the container's processes may really run on, as the kernel applies the cpuset.
        allowed = host.check_output("docker exec %s grep Cpus_allowed_list /proc/1/status", container)
        cpus[container] = set(parse_id_list(allowed.split()[-1]) or ())
    # Stand-in KFD topology (tests/lab/rootfs.py): GPU 0 -> renderD128, GPU 1 -> renderD129.
    assert devices == {
        "vllm-tiny-llama-a": {"/dev/kfd", "/dev/dri/renderD128"},
        "vllm-tiny-llama-b": {"/dev/kfd", "/dev/dri/renderD129"},
    }
    # Both GPUs are on the lab machine's one NUMA node: its CPUs are split between the two.
    node = set(parse_id_list(host.check_output("cat /sys/devices/system/node/node0/cpulist")) or ())
    a, b = cpus["vllm-tiny-llama-a"], cpus["vllm-tiny-llama-b"]
    assert a and b and not a & b and a | b == node, cpus


def test_the_model_was_fetched_once_per_host_and_instances_read_it_offline(lab, first_deploy):
    """The lab profile's hub model (``lab/tiny-llama`` at its pinned commit, from the stand-in Hub:
    tests/lab/hfhub.py) was downloaded once per host, lab-1's two instances included, with the
    vault token; the instances mount the cache read-only and run offline (issue 27)."""
    from tests.lab import hfhub, services

    counts = hfhub.downloads(services.HF_HUB_LOG)
    per_host = {name: counts.get(address, {}) for name, address in lab.hosts.items()}
    files = set().union(*(set(c) for c in per_host.values()))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= files, per_host
    for name, got in per_host.items():
        assert got == dict.fromkeys(files, 1), (name, got)  # once per host, not once per instance
    log = services.HF_HUB_LOG.read_text()
    assert TOKEN not in log
    fetched = [json.loads(line) for line in log.splitlines() if '"file"' in line]
    assert fetched and all(entry["auth"] for entry in fetched), fetched[:3]  # the token reached the Hub
    name = sorted(lab.hosts)[0]
    for unit in FIRST_HOST_UNITS:
        container = unit.removesuffix(".service")
        shown = lab_ssh(
            lab,
            name,
            f"docker exec {container} printenv HF_HUB_OFFLINE; docker inspect --format "
            "'{{range .Mounts}}{{if eq .Destination \"/root/.cache/huggingface\"}}{{.RW}}{{end}}{{end}}' " + container,
        )
        assert shown.stdout.split() == ["1", "false"], (container, shown.stdout, shown.stderr)


def test_two_instances_start_together_after_a_reboot_each_on_its_own_internal_ports(lab, first_deploy):
    """lab-1 rebooted: systemd starts both units at boot, side by side; each container has its own
    VLLM_PORT (vLLM's internal ports, from the plan: issue 27), both serve, and neither unit
    restarted or logged a port already in use. (Two, not four, instances: the lab's hosts have the
    CI machine's CPUs, two on its one NUMA node, and instances never share a CPU.)"""
    name = sorted(lab.hosts)[0]
    boot = lab_ssh(lab, name, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    lab_ssh(lab, name, "systemctl reboot", timeout_s=60)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        now = lab_ssh(lab, name, "cat /proc/sys/kernel/random/boot_id", timeout_s=30)
        if now.returncode == 0 and now.stdout.strip() not in ("", boot):
            break
        time.sleep(5)
    else:
        raise AssertionError(f"{name} did not come back from its reboot in 300 s")
    for port in FIRST_HOST_UNITS.values():
        wait_for_completion(lab.hosts[name], port, timeout_s=900)
    ports = {}
    for unit in FIRST_HOST_UNITS:
        container = unit.removesuffix(".service")
        shown = lab_ssh(
            lab, name, f"systemctl show -p NRestarts --value {unit}; docker exec {container} printenv VLLM_PORT"
        )
        restarts, port = shown.stdout.split()
        assert restarts == "0", (unit, shown.stdout)
        ports[container] = int(port)
    assert len(set(ports.values())) == 2 and set(ports.values()).isdisjoint(FIRST_HOST_UNITS.values()), ports
    journal = lab_ssh(lab, name, "journalctl -b -u 'vllm-*' --no-pager | grep -ci 'address already in use' || true")
    assert journal.stdout.strip() == "0", journal.stdout


def test_the_vault_token_reaches_the_container_and_nothing_else(lab, first_deploy, ssh_config):
    rc, report, stderr = first_deploy
    assert TOKEN not in json.dumps(report) + stderr  # pyinfra's output with -v
    for name, address in lab.hosts.items():
        host = connect(address, ssh_config)
        for unit in units(lab, name):
            container = unit.removesuffix(".service")
            secrets = host.file(f"/etc/rocmfleet/vllm/{container.removeprefix('vllm-')}.secrets")
            assert (secrets.user, secrets.group, secrets.mode) == ("root", "root", 0o600)
            assert host.check_output("docker exec %s printenv HF_TOKEN", container) == TOKEN
            for text in (
                host.file(f"/etc/systemd/system/{unit}").content_string,
                host.check_output("docker inspect --format '{{.Path}} {{.Args}}' %s", container),
                host.check_output("ps -eo args"),
                host.check_output("journalctl --no-pager -u %s", unit),
                host.check_output("docker logs %s 2>&1", container),
            ):
                assert TOKEN not in text


#: Runs inside the lab's real vLLM: each argv through ``vllm serve``'s own parser and checks
#: (vllm/entrypoints/launchers/cli_args.py in vLLM 0.32). Prints {name: "ok" | reason}.
PARSER_PROBE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    try:
        validate_parsed_serve_args(make_arg_parser(FlexibleArgumentParser()).parse_args(argv))
        out[name] = "ok"
    except SystemExit as exc:
        out[name] = f"rejected (exit {exc.code})"
    except Exception as exc:
        out[name] = f"rejected: {exc}"
print(json.dumps(out))
"""


def test_rendered_arguments_pass_vllms_own_parser(lab, first_deploy, ssh_config):
    version = "0.32.0"  # the lab image's vLLM; every shipped profile rendered for it
    argvs = {name: [p.model, *p.render(version).args] for name, p in every_profile().items()}
    argvs["bogus (must be rejected)"] = ["m", "--no-such-flag", "1"]
    host = connect(sorted(lab.hosts.values())[0], ssh_config)
    out = host.check_output("docker exec vllm-tiny-llama-a python -c %s %s", PARSER_PROBE, json.dumps(argvs))
    verdicts = json.loads(out.splitlines()[-1])
    assert verdicts.pop("bogus (must be rejected)").startswith("rejected")
    assert verdicts == dict.fromkeys(argvs.keys() - {"bogus (must be rejected)"}, "ok")


def test_second_deploy_reports_no_changes(lab, first_deploy):
    rc, report, stderr = pyinfra_deploy()
    assert rc == 0, stderr[-4000:]
    changed = {op["name"]: op["success"] for op in report["results"]["operations"] if op["success"]}
    assert changed == {}, f"operations that changed something on the second run: {changed}"


def record_host(lab, name: str) -> dict:
    """A recorded host (``rocmfleet.plan.sources``) of lab host ``name``: the GPU topology script's
    output, the group ids of ``/dev/kfd`` and the render nodes, the OS, as the deploy reads them."""
    from rocmfleet.facts.topology import GpuTopology

    topology = lab_ssh(lab, name, GpuTopology().command())
    assert topology.returncode == 0, topology.stderr
    gids = lab_ssh(lab, name, "stat -c %g /dev/kfd /dev/dri/renderD*")
    assert gids.returncode == 0, gids.stderr
    release = lab_ssh(lab, name, '. /etc/os-release; echo "$ID" "$VERSION_ID" "$VERSION_CODENAME" "$(uname -r)"')
    os_id, version_id, codename, kernel = release.stdout.split()
    return {
        "topology": topology.stdout.splitlines(),
        "device_gids": sorted({int(g) for g in gids.stdout.split()}),
        "os": {"id": os_id, "version_id": version_id, "codename": codename, "kernel": kernel},
    }


def printed_files(stdout: str) -> dict[str, tuple[str, bytes]]:
    """``{path: (header, content)}`` of ``rocmfleet plan --files``' output (``rocmfleet.plan.render``:
    a header line naming the size, then that many bytes and a newline)."""
    from rocmfleet.plan.render import FILE_HEADER

    data, found, at = stdout.encode(), {}, 0
    while (start := data.find(f"\n{FILE_HEADER}".encode(), at)) >= 0:
        end = data.index(b"\n", start + 1)
        header = data[start + 1 : end].decode()
        size = int(header.rsplit(", ", 1)[1].split()[0])
        path = header.removeprefix(FILE_HEADER).split(" ")[1]
        found[path] = (header, data[end + 1 : end + 1 + size])
        at = end + 1 + size
    return found


def test_plan_files_of_the_first_host_are_byte_for_byte_what_the_deploy_wrote(lab, first_deploy, tmp_path):
    """``rocmfleet plan inventories/lab.py --limit lab-1 --files --topology <lab-1 recorded>``, with
    no connection of its own, prints every file the deploy wrote on lab-1 (every role) as it is
    there: content, mode and owner."""
    import base64

    name = sorted(lab.hosts)[0]
    recorded = tmp_path / f"{name}.json"
    recorded.write_text(json.dumps(record_host(lab, name)))
    run = rocmfleet_cli("plan", "inventories/lab.py", "--limit", name, "--files", "--topology", str(recorded))
    assert run.returncode == 0, run.stderr
    assert f"topology: recorded host {recorded}" in run.stdout and "assumed:" not in run.stdout
    files = printed_files(run.stdout)
    roles = {header.split(", role ")[1].split(",")[0] for header, _ in files.values()}
    assert roles == {"base", "rocm", "tuning", "exporter", "docker", "vllm"}, roles
    differ = []
    for path, (header, content) in files.items():
        got = lab_ssh(lab, name, f"stat -c '%a %U:%G' {path} && base64 -w0 {path}")
        assert got.returncode == 0, f"{path}: {got.stderr}"
        mode_owner, encoded = got.stdout.split("\n", 1)
        mode, owner = mode_owner.split()
        want_mode, want_owner = header.split("(mode ", 1)[1].split(", role")[0].split(", owner ")
        user, group = want_owner.split(":")
        if base64.b64decode(encoded) != content:
            differ.append(f"{path}: content")
        if want_mode != "-" and int(mode, 8) != int(want_mode, 8):
            differ.append(f"{path}: mode {mode}, plan {want_mode}")
        if (user != "-" and owner.split(":")[0] != user) or (group != "-" and owner.split(":")[1] != group):
            differ.append(f"{path}: owner {owner}, plan {want_owner}")
    assert not differ, differ


STARTS = ("vllm | Restart vllm-", "vllm | Enable and start vllm-")


def test_a_new_digest_on_one_host_and_a_renamed_instance_on_another_restart_only_those(
    lab, first_deploy, ssh_config, tmp_path
):
    """One deploy of the lab with lab-3 on the second image tag and lab-1's tiny-llama-b renamed
    tiny-llama-c (same port and GPU), then the inventory's data again: each time only those two
    instances restart. b's unit, files and container go and c serves; lab-1's tiny-llama-a and
    lab-2 keep running. While lab-3 runs the other digest, ``rocmfleet check`` fails lab-3's image
    digest and nothing else (issue 6: a container not running the wanted image)."""
    names = sorted(lab.hosts)
    first, target = names[0], names[-1]
    repo = f"{lab.registry}/rocmfleet-lab/vllm-cpu"
    renamed = {
        "vllm_instances": [
            {"name": "tiny-llama-a", "port": 8000, "gpus": [0]},
            {"name": "tiny-llama-c", "port": 8001, "gpus": [1]},
        ]
    }
    new = {"vllm_image_tag": "0.32.0-lab.2", "vllm_image_digest": lab.images[f"{repo}:0.32.0-lab.2"]}
    (tmp_path / "check").mkdir()
    (tmp_path / "deploy").mkdir()
    wants_old_digest = lab_inventory(tmp_path / "check", {first: renamed})
    changed = lab_inventory(tmp_path / "deploy", {first: renamed, target: new})

    def started_at() -> dict[str, str]:
        """``{"<container>@<host>": "<StartedAt> <image>"}`` of every vLLM container."""
        out = {}
        for name in names:
            host = connect(lab.hosts[name], ssh_config)
            listed = host.check_output("docker ps --filter label=org.rocmfleet.instance --format '{{.Names}}'")
            for container in listed.split():
                out[f"{container}@{name}"] = host.check_output(
                    "docker inspect --format '{{.State.StartedAt}} {{.Config.Image}}' %s", container
                )
        return out

    def started_or_restarted(report: dict) -> set[str]:
        """Hosts where the deploy started a unit (c, then b) or restarted one (lab-3's)."""
        ops = [op for op in report["results"]["operations"] if op["name"].startswith(STARTS)]
        return {host for op in ops for host in op["success"]}

    before = started_at()
    kept = {k: v for k, v in before.items() if k == f"vllm-tiny-llama-a@{first}" or k.endswith(f"@{names[1]}")}
    rc, report, stderr = pyinfra_json("deploy.py", "-y", inventory=changed)
    assert rc == 0, stderr[-4000:]
    assert started_or_restarted(report) == {first, target}
    after = started_at()
    assert {k: after.get(k) for k in kept} == kept  # not restarted
    assert ":0.32.0-lab.2@" in after[f"vllm-lab-tiny-llama-0@{target}"]
    assert f"vllm-tiny-llama-b@{first}" not in after
    leftovers = lab_ssh(
        lab, first, "ls /etc/systemd/system/vllm-* /etc/rocmfleet/vllm; docker ps -a --format '{{.Names}}'"
    )
    assert "tiny-llama-b" not in leftovers.stdout, leftovers.stdout
    owner = lab_ssh(lab, first, "docker top vllm-tiny-llama-c -eo pid | tail -n +2; ss -Hltnp 'sport = :8001'")
    pids = owner.stdout.splitlines()[:-1]
    assert any(f"pid={pid}," in owner.stdout.splitlines()[-1] for pid in pids), owner.stdout
    assert complete(lab.hosts[first], 8001)["model"] == MODEL
    wait_for_completion(lab.hosts[target])
    assert_check_fails_the_digest_only_on(
        target, repo, lab.images[f"{repo}:0.32.0-lab.1"], tmp_path, inventory=wants_old_digest
    )

    # The inventory's data again: c goes, b comes back, lab-3 back on the first tag.
    rc, report, stderr = pyinfra_deploy()
    assert rc == 0, stderr[-4000:]
    assert started_or_restarted(report) == {first, target}
    again = started_at()
    assert {k: again.get(k) for k in kept} == kept
    assert set(again) == set(before)
    assert ":0.32.0-lab.1@" in again[f"vllm-lab-tiny-llama-0@{target}"]
    for name in (first, target):
        for port in units(lab, name).values():
            wait_for_completion(lab.hosts[name], port)


def assert_check_fails_the_digest_only_on(
    target: str, repo: str, wanted: str, tmp_path, inventory: str = "inventories/lab.py"
) -> None:
    """``rocmfleet check`` over ``inventory`` (whose group data wants ``repo@wanted``): ``target``'s
    container image digest fails, saying what the data wants; no other host fails anything."""
    report_file = tmp_path / "check.json"
    proc = rocmfleet_cli("check", inventory, "--json", str(report_file))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output[-4000:]
    results = json.loads(report_file.read_text())["results"]
    failed = {(r["host"], r["check"]) for r in results if r["outcome"] == "failed"}
    assert {host for host, _ in failed} == {target}, failed
    assert (target, "vllm::container_image_digest[lab-tiny-llama-0]") in failed, failed
    assert f"group data wants {repo}@{wanted}" in output, output[-4000:]
