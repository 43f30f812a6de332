"""Operations for vLLM servers: readiness, the argument check before a swap, roll back, last good versions.

The order that keeps a failed new version from leaving an instance broken is in
:mod:`rocmfleet.rollout`; ``roles/vllm`` calls these operations in that order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

from pyinfra import host, state
from pyinfra.api import OperationError, StringCommand, operation

from rocmfleet import rollout
from rocmfleet.facts.rollout import LastGood
from rocmfleet.facts.vllm import VllmReady


@operation()
def serve_args_check(
    instance: str,
    image: str,
    serve_args: Sequence[str],
    env: Mapping[str, str],
    last_good: rollout.LastGoodFiles,
):
    """
    Check ``vllm serve`` arguments with the image's own vLLM argument parser; fail the host if it
    rejects them.

    + instance: instance name (for messages and the check container's label)
    + image: the image the instance is about to run (pulled already; by digest)
    + serve_args: its ``vllm serve`` arguments (``rocmfleet.vllm.serve_args``)
    + env: its container environment without secrets (``rocmfleet.vllm.container_env``)
    + last_good: its files (``rocmfleet.rollout.last_good_files``)

    Runs ``python3`` in a throw-away container of ``image`` without devices or network
    (``rocmfleet.rollout.serve_args_check_argv``): argparse's ``error: ...`` or vLLM's failed check
    fails the host before the running container is touched. A no-op when the instance's last good
    version (``serve.json``) already ran exactly this image, these arguments and this environment.

    **Example:**

    .. code:: python

        vllm.serve_args_check(
            name="Check vllm serve arguments of vllm-a",
            instance="a",
            image="vllm/vllm-openai-rocm:v0.33.0@sha256:...",
            serve_args=["Qwen/Qwen3-0.6B", "--port", "8000"],
            env={},
            last_good=rollout.last_good_files("/etc/rocmfleet/vllm", "a", unit, env_file, secrets_file),
        )
    """
    record = rollout.serve_record(image, serve_args, env)
    saved = host.get_fact(LastGood, files=last_good)
    if saved.serve == json.loads(record):
        host.noop(f"{instance}: its last good version ran these vllm serve arguments on this image")
        return
    yield StringCommand(rollout.serve_args_check_script(image, serve_args, env, instance))


@operation()
def ready_or_roll_back(targets: Sequence[rollout.WaitTarget], timeout_s: int = 1800, rollback_timeout_s: int = 1800):
    """
    Wait until every instance is ready; roll back each one that is not by the deadline, and fail the host.

    + targets: the host's instances (``rocmfleet.rollout.WaitTarget``; ``roll_back_to`` is
      filled in here, from the host)
    + timeout_s: deadline for new versions, seconds (model load and compilation take minutes)
    + rollback_timeout_s: deadline for a restored version to be ready again, seconds

    Instances that are ready are left alone; when all are, this is a no-op. An instance not ready
    by the deadline whose live files differ from a complete last good version gets those files
    back, a ``daemon-reload`` and a restart, and the operation waits for it to be ready again. The
    host fails in either case, with the new container's last log lines and, for each instance
    rolled back, which image it went back to (``rocmfleet.rollout.wait_or_roll_back_script``).
    Wait for all instances in one operation: a failed operation stops the host, so a per-instance
    operation would leave the instances after the first failure unrolled.

    **Example:**

    .. code:: python

        vllm.ready_or_roll_back(name="Wait until vLLM is ready", targets=[target_a, target_b], timeout_s=1800)
    """
    waiting = [t for t in targets if not host.get_fact(VllmReady, port=t.port, model=t.model)]
    if not waiting:
        host.noop(f"vLLM instances {', '.join(t.name for t in targets)} are ready")
        return
    planned = []
    for target in waiting:
        saved = host.get_fact(LastGood, files=target.files)
        back = saved.image if saved.complete and not saved.same else None
        planned.append(replace(target, roll_back_to=back))
    yield StringCommand(rollout.wait_or_roll_back_script(planned, timeout_s, rollback_timeout_s))


@operation()
def last_good(instance: str, port: int, model: str, files: rollout.LastGoodFiles, record: str):
    """
    Keep the instance's live files as its last good version (it is ready with them).

    + instance: instance name
    + port, model: its API port and served model name, to confirm it is ready
    + files: its live files and last good directory (``rocmfleet.rollout.last_good_files``)
    + record: ``rocmfleet.rollout.serve_record`` of what it runs now

    Run it after the instance was found ready (``ready_or_roll_back``). A no-op when the copies
    and ``serve.json`` already match. The copies are made on the host (secrets are never printed).

    **Example:**

    .. code:: python

        vllm.last_good(name="Keep vllm-a as last good", instance="a", port=8000, model="m", files=files, record=record)
    """
    saved = host.get_fact(LastGood, files=files)
    if saved.same and saved.serve == json.loads(record):
        host.noop(f"{instance}: its last good version is the running one")
        return
    if state.is_executing and not host.get_fact(VllmReady, port=port, model=model):
        raise OperationError(f"{instance}: not ready on port {port}; its files are not kept as the last good version")
    yield StringCommand(rollout.save_last_good_script(files, record))
