"""The shell command that runs a benchmark client in a container of its own (:data:`rocmfleet.fleet.bench.client.RUN`,
a rollout's gate): :func:`client_run`, with the host's Hugging Face cache mounted read-only.

Pure: no SSH.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence

from rocmfleet.domain import hfmodel
from rocmfleet.fleet.bench.client import KILL_AFTER_S, BenchClient, client_container


def client_run(
    client: BenchClient,
    instance: str,
    argv: Sequence[str],
    result_dir: str,
    env_file: str,
    hf_cache_dir: str,
    timeout_s: float,
) -> str:
    """The shell command that runs ``argv`` (a ``vllm bench serve`` argv) in a container of
    ``client.image`` of its own, quoted for ``sh``.

    ``docker run --rm --network host`` (the server's port on 127.0.0.1), no devices (an HTTP
    client), the instance's environment file (``--env-file``: the deploy writes it without
    secrets, which the unit passes as ``--env NAME``), the host's Hugging Face cache read-only
    (the tokenizer the server loaded) with ``HF_HUB_OFFLINE=1``, so the client needs no token and
    no secret appears in its arguments; ``result_dir`` (on the host) mounted at the same path, so
    the JSON lands on the host. A leftover client container of the instance is removed first.
    Coreutils ``timeout`` is its entrypoint (SIGTERM after ``timeout_s`` seconds, rounded up,
    SIGKILL :data:`KILL_AFTER_S` later; exit 124 when time ran out), as for ``docker exec``.

    Raises:
        ValueError: ``timeout_s`` is not > 0, or ``argv`` does not start with ``vllm``.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if not argv or argv[0] != "vllm":
        raise ValueError(f"argv must be a vllm command, got {list(argv)[:3]}")
    name = client_container(instance)
    run = [
        "docker", "run", "--rm", "--name", name,
        "--network", "host",
        "--env-file", env_file,
        "--env", "HF_HUB_OFFLINE=1",
        "--volume", hfmodel.cache_volume(hf_cache_dir),
        "--volume", f"{result_dir}:{result_dir}",
        "--entrypoint", "timeout",
        client.image,
        f"--kill-after={KILL_AFTER_S}", str(math.ceil(timeout_s)),
        *argv,
    ]  # fmt: skip
    leftover = shlex.join(["docker", "rm", "--force", name])
    return f"{leftover} >/dev/null 2>&1; mkdir -p {shlex.quote(result_dir)} && {shlex.join(run)}"
