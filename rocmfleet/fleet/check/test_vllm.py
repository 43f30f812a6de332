"""Compliance of the vLLM role, per instance: unit, container (image digest, arguments,
environment, devices and CPUs), API and internal ports, and readiness.

A check whose precondition is already reported skips, naming it: with the unit stopped only
``test_unit_enabled_and_active`` fails, not every check about the container it would run.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from rocmfleet import scripts
from rocmfleet.domain import docker, partitions, readiness, vllm
from rocmfleet.domain.partitionmodes import PartitionPolicy
from rocmfleet.domain.tooloutput import CannotCheck
from rocmfleet.domain.topology import Topology
from rocmfleet.fleet.check import checkfile, expect
from rocmfleet.plan.checkmodel import CheckInstance, CheckValues
from rocmfleet.plan.drift import Drift, WantedMode, WantedUnit, drift, plan_wanted
from rocmfleet.plan.model import HostPlan, InstancePlan


@pytest.fixture
def unit(host: Any, instance: CheckInstance, docker_running: object) -> str:
    """The instance's unit name (its state: :func:`rocmfleet.fleet.check.expect.unit_state`)."""
    return instance.unit


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
def container(host: Any, instance: CheckInstance, unit: str) -> dict[str, Any]:
    """``docker inspect`` of the instance's running container (read once: ``expect.container_inspect``)."""
    if not expect.running(host, unit):
        pytest.skip(f"{unit} is not active (reported by test_unit_enabled_and_active)")
    result = expect.container_inspect(host, instance.container)
    assert result.rc == 0, (
        f"{instance.unit} is active but has no container {instance.container}: {result.stderr.strip()}"
    )
    return docker.parse_inspect(result.stdout, instance.container)


def policy(checks: CheckValues) -> PartitionPolicy:
    """The profile's partition modes (the plan's :class:`~rocmfleet.plan.model.CheckValues`)."""
    return PartitionPolicy(checks.compute_partition, checks.memory_partition, checks.tp_on_one_gpu)


def placed(plan: HostPlan, instance: CheckInstance) -> InstancePlan | None:
    """The instance as the plan placed it on the topology read from the host (``None``: not placed,
    ``plan.problem`` says why).

    Raises:
        CannotCheck: the plan was made without the host's facts (their read failed).
    """
    if plan.topology_source.startswith(checkfile.UNREAD):
        raise CannotCheck(f"the plan was made without the host's facts: {plan.topology_source}")
    return next((i for i in plan.instances if i.name == instance.name), None)


@pytest.fixture
def placement(plan: HostPlan, checks: CheckValues, topology: Topology, instance: CheckInstance) -> InstancePlan:
    """The instance's placement in the host's plan (its GPUs, render nodes, CPU binding, environment file)."""
    if partitions.mode_problems(topology, policy(checks)):
        pytest.skip("GPUs not in the profile's partition modes (reported by test_gpu_partition_modes)")
    found = placed(plan, instance)
    if found is None:
        raise CannotCheck(f"{instance.name} is not placed: {plan.problem}")
    return found


def test_gpu_partition_modes(checks: CheckValues, topology: Topology) -> None:
    """Each physical GPU's compute and memory partition modes (sysfs, else KFD) against the profile's
    (SPX/NPS1 unless it opts into another); a mode that cannot be read passes."""
    problems = partitions.mode_problems(topology, policy(checks), profile=checks.profile)
    assert not problems, "; ".join(problems)


def test_unit_enabled_and_active(host: Any, unit: str) -> None:
    """The unit is enabled and active, the deploy's rule (:func:`rocmfleet.plan.drift.drift`)."""
    _assert_no_drift(drift([WantedUnit(unit)], expect.gathered(host)))


def test_instance_files_as_wanted(host: Any, plan: HostPlan, instance: CheckInstance) -> None:
    """The environment file holds what the deploy renders (the host's plan: the deploy's own renderer,
    for the placement on the topology read from the host), and it, the unit and the secrets file are
    regular files with the deploy's modes and owners: no :func:`rocmfleet.plan.drift.drift`. The
    unit's text is not compared here: the image, devices and arguments it runs are the container
    checks' (one fault, one failed check); the secrets' values never reach the check."""
    assert placed(plan, instance) is not None, plan.problem
    files = {f.path: f for f in plan.files}
    two = (files[instance.env_file], files[instance.secrets_file])
    env, secrets = plan_wanted(dataclasses.replace(plan, files=two, directories=(), packages=(), units=(), removals=()))
    unit = WantedMode(instance.unit_path, files[instance.unit_path].mode)  # its mode only: the text is not compared
    items = [env, unit, secrets]
    _assert_no_drift(drift(items, expect.gathered(host)))


def _assert_no_drift(found: list[Drift]) -> None:
    """Fail with every drift; an item the read did not report is an error, never a pass or a failure."""
    unread = [str(d) for d in found if d.field == "not read"]
    if unread:
        raise CannotCheck("; ".join(unread))
    assert not found, "; ".join(map(str, found))


def test_container_image_digest(host: Any, checks: CheckValues, container: dict[str, Any]) -> None:
    """The instance's container runs the image by the digest group data pins (``repository@sha256:...``)."""
    wanted = checks.image_pinned
    command = f"docker image inspect --format '{{{{json .RepoDigests}}}}' {container['Image']}"
    image = expect.once(host, command, lambda: host.run(command))  # instances share their image
    digests = json.loads(image.stdout) if image.rc == 0 and image.stdout.strip().startswith("[") else []
    assert wanted in digests, (
        f"{container['Name'].lstrip('/')} runs {container['Config']['Image']} "
        f"(digests {', '.join(digests) or 'unknown'}); group data wants {wanted}"
    )


def test_container_arguments(plan: HostPlan, instance: CheckInstance, container: dict[str, Any]) -> None:
    """The container's ``vllm serve`` arguments are exactly those rendered for the profile and the image's vLLM
    version (the plan's ``vllm serve`` line)."""
    found = placed(plan, instance)
    if found is None:
        raise CannotCheck(f"{instance.name} is not placed: {plan.problem}")
    wanted = list(found.serve_argv[2:])
    assert container["Config"]["Cmd"] == wanted, f"vllm serve arguments {container['Config']['Cmd']}, want {wanted}"


def env_of(text: str) -> dict[str, str]:
    """The variables of an environment file as Docker's ``--env-file`` reads it: ``NAME=value`` lines,
    ``#`` comments and blank lines skipped."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_container_environment(
    plan: HostPlan, instance: CheckInstance, placement: InstancePlan, container: dict[str, Any]
) -> None:
    """The container's environment has every rendered variable at its value (the plan's environment file),
    and every secret's name (values never compared in the report)."""
    live = dict(line.split("=", 1) for line in container["Config"]["Env"] or [] if "=" in line)
    wanted = env_of(placement.env_text)
    differ = sorted(k for k, v in wanted.items() if live.get(k) != v)
    assert not differ, "environment differs: " + ", ".join(f"{k}={live.get(k)!r}, want {wanted[k]!r}" for k in differ)
    names = next((f.secret_names for f in plan.files if f.path == instance.secrets_file), ())
    missing = sorted(name for name in names if name not in live)
    assert not missing, f"secret variables not set in the container: {', '.join(missing)}"  # names only


def test_container_devices_and_cpus(host: Any, placement: InstancePlan, container: dict[str, Any]) -> None:
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


def test_port_answering(host: Any, instance: CheckInstance, unit: str) -> None:
    """The instance's port answers ``/health``; skipped when its unit is not active."""
    if not expect.running(host, unit):
        pytest.skip(f"{unit} is not active (reported by test_unit_enabled_and_active)")
    probe = _health(host, instance.port)
    assert probe.rc == 0, f"port {instance.port}: {probe.stderr.strip()}"


def test_internal_ports_ours(host: Any, instance: CheckInstance, unit: str) -> None:
    """No process but the instance's own container listens on its internal ports (``VLLM_PORT``'s
    block, :mod:`rocmfleet.domain.ports`): free before start, the container's (its torch.distributed
    rendezvous) after. One ``ss`` read of the block (``vllm-probe.sh owner FIRST-LAST``)."""
    block = instance.internal_ports
    container = instance.container
    owner = host.run(scripts.command("vllm-probe.sh", "owner", block, container)).stdout.strip()
    assert owner in ("free", "ours"), (
        f"internal ports {block} (VLLM_PORT) of {unit}: held by {owner.removeprefix('other ')}, not {container}"
    )


def test_ready(host: Any, checks: CheckValues, instance: CheckInstance, unit: str) -> None:
    """The instance serves: ``/v1/models`` lists the served name and a completion request gets an answer (the profile's
    known answer when it has one)."""
    if not expect.running(host, unit):
        pytest.skip(f"{unit} is not active (reported by test_unit_enabled_and_active)")
    if _health(host, instance.port).rc not in (0, 22):
        pytest.skip(f"port {instance.port} does not answer (reported by test_port_answering)")
    container = instance.container
    known = readiness.ReadyProbe.model_validate(checks.ready_probe) if checks.ready_probe else None
    model = checks.served_model
    # The host fetches the answers; they are judged here (readiness.judge), not in the container.
    asked = host.run(readiness.answers_script(instance.port, model, container, known, ANSWER_S))
    status, reason = readiness.judge(asked.stdout_bytes, model, known) if asked.rc == 0 else (asked.rc, asked.stderr)
    if "no answer within" in reason:  # a wedged engine: the one line says so (issue 26)
        assert status == 0, f"port {instance.port}: {reason.strip().splitlines()[-1]}"
    assert status == 0, (
        f"port {instance.port} not ready (held by {container}, /health 200, /v1/models lists "
        f"{model!r}, one completion{', the known answer' if known else ''}): {reason.strip()[-400:]}"
    )
