"""Compliance of the vLLM role, per instance: unit, container (image digest, arguments,
environment, devices and CPUs), API and internal ports, and readiness.

A check whose precondition is already reported skips, naming it: with the unit stopped only
``test_unit_enabled_and_active`` fails, not every check about the container it would run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from rocmfleet import scripts
from rocmfleet.config.instances import Instance
from rocmfleet.config.settings import HostConfig
from rocmfleet.domain import docker, partitions, readiness, vllm, vllmfiles, vllmplace
from rocmfleet.domain.placement import Placement
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.domain.topology import Topology
from rocmfleet.fleet.check import expect
from rocmfleet.plan import vllmplan
from rocmfleet.plan.drift import Drift, WantedMode, WantedUnit, drift
from rocmfleet.plan.instance import HostPlacement, instance_files, place_host, vllm_settings


@pytest.fixture
def unit(host: Any, instance: Instance, docker_running: object) -> str:
    """The instance's unit name (its state: :func:`rocmfleet.fleet.check.expect.unit_state`)."""
    return vllmfiles.files_of(instance).unit


#: Seconds the check's completion may take: a wedged engine (``/health`` 200, no answer) is a FAIL
#: well within the check's 30 s (issue 26), while a busy server answers a short known-answer
#: request in a few seconds.
ANSWER_S = 15


def _health(host: Any, port: int) -> Any:
    """``GET /health`` on ``port`` (testinfra's result), once per host and port: exit 0 for 200,
    22 for another HTTP status (``curl -f``: 503 once the engine is dead), 7 when nothing listens."""
    return expect.once(
        host, f"health {port}", lambda: host.run(f"curl -fsS -m 5 -o /dev/null http://127.0.0.1:{port}/health")
    )


@pytest.fixture
def container(host: Any, instance: Instance, unit: str) -> dict[str, Any]:
    """``docker inspect`` of the instance's running container (read once: ``expect.container_inspect``)."""
    names = vllmfiles.files_of(instance)
    if not expect.running(host, unit):
        pytest.skip(f"{unit} is not active (reported by test_unit_enabled_and_active)")
    result = expect.container_inspect(host, names.container)
    assert result.rc == 0, f"{names.unit} is active but has no container {names.container}: {result.stderr.strip()}"
    return docker.parse_inspect(result.stdout, names.container)


@pytest.fixture
def placement(config: HostConfig, topology: Topology, instance: Instance) -> Placement:
    if partitions.mode_problems(topology, vllm_settings(config).partition_policy):
        pytest.skip("GPUs not in the profile's partition modes (reported by test_gpu_partition_modes)")
    return vllmplace.placements(vllm_settings(config), topology)[instance.name]


def test_gpu_partition_modes(config: HostConfig, topology: Topology) -> None:
    """Each physical GPU's compute and memory partition modes (sysfs, else KFD) against the profile's
    (SPX/NPS1 unless it opts into another); a mode that cannot be read passes."""
    problems = partitions.mode_problems(topology, vllm_settings(config).partition_policy, profile=config.profile.name)
    assert not problems, "; ".join(problems)


def test_unit_enabled_and_active(host: Any, unit: str) -> None:
    """The unit is enabled and active, the deploy's rule (:func:`rocmfleet.plan.drift.drift`)."""
    _assert_no_drift(drift([WantedUnit(unit)], expect.gathered(host)))


def test_instance_files_as_wanted(
    host: Any, config: HostConfig, topology: Topology, instance: Instance, placement: Placement
) -> None:
    """The environment file holds what the deploy renders (:func:`rocmfleet.plan.instance.instance_files`,
    the deploy's own renderer, for the placement on this topology), and it, the unit and the secrets
    file are regular files with the deploy's modes and owners: no :func:`rocmfleet.plan.drift.drift`.
    The unit's text is not compared here: the image, devices and arguments it runs are the
    container checks' (one fault, one failed check); the secrets' values never reach the check."""
    got = expect.gathered(host)
    placed = place_host(config, topology, vllmplan.device_gids(got))
    assert isinstance(placed, HostPlacement), placed
    rendered = instance_files(config, instance, placed)
    secrets = vllmfiles.files_of(instance).secrets_file
    unit = WantedMode(rendered.unit.path, rendered.unit.mode)
    _assert_no_drift(drift([rendered.env, unit, WantedMode(secrets, "600", "root", "root")], got))


def _assert_no_drift(found: list[Drift]) -> None:
    """Fail with every drift; an item the read did not report is an error, never a pass or a failure."""
    unread = [str(d) for d in found if d.field == "not read"]
    if unread:
        raise CannotCheck("; ".join(unread))
    assert not found, "; ".join(map(str, found))


def test_container_image_digest(host: Any, config: HostConfig, container: dict[str, Any]) -> None:
    """The instance's container runs the image by the digest group data pins (``repository@sha256:...``)."""
    wanted = f"{config.image.repository}@{config.image.digest}"
    command = f"docker image inspect --format '{{{{json .RepoDigests}}}}' {container['Image']}"
    image = expect.once(host, command, lambda: host.run(command))  # instances share their image
    digests = json.loads(image.stdout) if image.rc == 0 and image.stdout.strip().startswith("[") else []
    assert wanted in digests, (
        f"{container['Name'].lstrip('/')} runs {container['Config']['Image']} "
        f"(digests {', '.join(digests) or 'unknown'}); group data wants {wanted}"
    )


def test_container_arguments(config: HostConfig, instance: Instance, container: dict[str, Any]) -> None:
    """The container's ``vllm serve`` arguments are exactly those rendered for the profile and the image's vLLM
    version."""
    wanted = vllm.serve_args(vllm_settings(config), instance)
    assert container["Config"]["Cmd"] == wanted, f"vllm serve arguments {container['Config']['Cmd']}, want {wanted}"


def test_container_environment(config: HostConfig, placement: Placement, container: dict[str, Any]) -> None:
    """The container's environment has every rendered variable at its value, and every secret's name (values never
    compared in the report)."""
    live = dict(line.split("=", 1) for line in container["Config"]["Env"] or [] if "=" in line)
    wanted = vllm.container_env(vllm_settings(config), placement)
    differ = sorted(k for k, v in wanted.items() if live.get(k) != v)
    assert not differ, "environment differs: " + ", ".join(f"{k}={live.get(k)!r}, want {wanted[k]!r}" for k in differ)
    missing = sorted(name for name in config.settings.vllm_secret_env if name not in live)
    assert not missing, f"secret variables not set in the container: {', '.join(missing)}"  # names only


def test_container_devices_and_cpus(host: Any, placement: Placement, container: dict[str, Any]) -> None:
    """The container gets /dev/kfd and its GPUs' render nodes only, the CPU and memory sets of its NUMA placement, and
    the render group."""
    hc = container["HostConfig"]
    devices = sorted(d["PathOnHost"] for d in hc.get("Devices") or [])
    wanted = sorted([vllm.KFD, *placement.render_nodes])
    assert devices == wanted, f"devices {', '.join(devices)}; want {', '.join(wanted)}"
    live = (hc.get("CpusetCpus") or "", hc.get("CpusetMems") or "")
    want = (placement.cpuset_cpus or "", placement.cpuset_mems or "")
    assert live == want, f"cpuset-cpus {live[0]!r} cpuset-mems {live[1]!r}; want {want[0]!r} and {want[1]!r}"
    render = expect.render_gid(host)
    if render is not None:
        assert str(render) in (hc.get("GroupAdd") or []), f"group-add {hc.get('GroupAdd')} lacks render's GID"


def test_port_answering(host: Any, instance: Instance, unit: str) -> None:
    """The instance's port answers ``/health``; skipped when its unit is not active."""
    if not expect.running(host, unit):
        pytest.skip(f"{unit} is not active (reported by test_unit_enabled_and_active)")
    probe = _health(host, instance.port)
    assert probe.rc == 0, f"port {instance.port}: {probe.stderr.strip()}"


def test_internal_ports_ours(host: Any, instance: Instance, unit: str) -> None:
    """No process but the instance's own container listens on its internal ports (``VLLM_PORT``'s
    block, :mod:`rocmfleet.domain.ports`): free before start, the container's (its torch.distributed
    rendezvous) after. One ``ss`` read of the block (``vllm-probe.sh owner FIRST-LAST``)."""
    block = instance.internal_ports.spec()
    container = vllmfiles.files_of(instance).container
    owner = host.run(scripts.command("vllm-probe.sh", "owner", block, container)).stdout.strip()
    assert owner in ("free", "ours"), (
        f"internal ports {block} (VLLM_PORT) of {unit}: held by {owner.removeprefix('other ')}, not {container}"
    )


def test_ready(host: Any, config: HostConfig, instance: Instance, unit: str) -> None:
    """The instance serves: ``/v1/models`` lists the served name and a completion request gets an answer (the profile's
    known answer when it has one)."""
    if not expect.running(host, unit):
        pytest.skip(f"{unit} is not active (reported by test_unit_enabled_and_active)")
    if _health(host, instance.port).rc not in (0, 22):
        pytest.skip(f"port {instance.port} does not answer (reported by test_port_answering)")
    container = vllmfiles.files_of(instance).container
    known = config.profile.ready_probe
    model = config.profile.served_model_name
    # The host fetches the answers; they are judged here (readiness.judge), not in the container.
    asked = host.run(readiness.answers_script(instance.port, model, container, known, ANSWER_S))
    status, reason = readiness.judge(asked.stdout_bytes, model, known) if asked.rc == 0 else (asked.rc, asked.stderr)
    if "no answer within" in reason:  # a wedged engine: the one line says so (issue 26)
        assert status == 0, f"port {instance.port}: {reason.strip().splitlines()[-1]}"
    assert status == 0, (
        f"port {instance.port} not ready (held by {container}, /health 200, /v1/models lists "
        f"{model!r}, one completion{', the known answer' if known else ''}): {reason.strip()[-400:]}"
    )
