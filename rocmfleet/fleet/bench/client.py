"""Which ``vllm bench serve`` runs a benchmark, and with what sampling: one client for a fair gate.

A rollout's gate compares a run against the old server (the baseline) with a run against the new
one. Each image ships its own benchmark client, and clients of different vLLM versions send
different requests: until vllm-project/vllm PR #32723 ("[Benchmark] Don't default to
``temperature==0`` in ``vllm bench serve``", merged 2026-01-20,
https://github.com/vllm-project/vllm/pull/32723) the client set ``temperature`` to 0 (greedy)
when ``--temperature`` was not given; since then it sends none, so the server's default
(the model's generation config, else 1.0) samples. A gate between images on either side of that
change compared greedy with sampled requests. So:

* every run pins its sampling and dataset seed (:data:`SAMPLING`: ``--temperature 0``,
  ``--seed 0``). ``--temperature`` is in the "sampling parameters" group since vLLM PR #16022
  (https://github.com/vllm-project/vllm/pull/16022, April 2025, ported to ``vllm bench serve``);
  ``--seed`` (default 0) is in every supported version (``../shared/reference/mi300x.md`` §5.1);
* a rollout runs both of a host's benchmarks with one client: the *new* image's ``vllm bench
  serve`` in a short-lived container of its own (:data:`RUN`,
  :func:`rocmfleet.fleet.bench.clientrun.client_run`), against the old server before the switch
  and the new one after it. The new image is on the host before
  the baseline (the rollout pulls it first). ``rocmfleet bench`` keeps running the client inside
  each serving container (:data:`EXEC`);
* each result records its client and sampling (``--metadata``, :func:`metadata`), the reports
  name them, and results of two different clients are not compared
  (:func:`rocmfleet.fleet.bench.verdicts.judge`).

Pure: no SSH.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

#: The sampling every run pins: greedy decoding and the random dataset's seed (vLLM's own default
#: seed, 0, made explicit so that no client default decides it).
TEMPERATURE: Final = 0.0
SEED: Final = 0
#: ``vllm bench serve`` flags of :data:`TEMPERATURE` and :data:`SEED`.
SAMPLING: Final = ("--temperature", "0", "--seed", str(SEED))

#: The client runs inside the serving container (``docker exec``): ``rocmfleet bench``.
EXEC: Final = "exec"
#: The client runs in a container of its own (``docker run --rm --network host``): a rollout's gate.
RUN: Final = "run"
Mode = Literal["exec", "run"]

#: ``--metadata`` keys (top-level keys of the saved JSON) that say which client ran and how it sampled.
CLIENT_IMAGE_KEY: Final = "rocmfleet_client_image"
CLIENT_VLLM_KEY: Final = "rocmfleet_client_vllm"
TEMPERATURE_KEY: Final = "rocmfleet_temperature"
SEED_KEY: Final = "rocmfleet_seed"
#: What a result without these keys (an older rocmfleet's) says its client was.
UNKNOWN: Final = "unknown"
#: Seconds coreutils ``timeout`` waits after SIGTERM before SIGKILL (as ``bench.KILL_AFTER_S``).
KILL_AFTER_S: Final = 10
#: The client container's name prefix; the instance's name follows (one client per instance at a time).
CLIENT_PREFIX: Final = "rocmfleet-bench-"


@dataclass(frozen=True)
class BenchClient:
    """The ``vllm bench serve`` that runs a benchmark.

    Attributes:
        image: its image, ``repository:tag@sha256:...``.
        vllm_version: the vLLM version in that image (the profile's ``vllm_version``).
        mode: :data:`EXEC` (in the serving container) or :data:`RUN` (a container of its own).
    """

    image: str
    vllm_version: str
    mode: Mode = EXEC

    def describe(self) -> str:
        """``vLLM <version> (<image>)``: how reports name the client."""
        return f"vLLM {self.vllm_version} ({self.image})"


@dataclass(frozen=True)
class ClientInfo:
    """Which client a saved result says ran it, and its sampling (``None``: not recorded)."""

    image: str | None = None
    vllm_version: str | None = None
    temperature: float | None = None
    seed: int | None = None

    @property
    def known(self) -> bool:
        return self.image is not None

    def describe(self) -> str:
        """``vLLM <version> (<image>), temperature 0, seed 0``, or ``client unknown`` (a result
        from before rocmfleet recorded it: its sampling was the client's default)."""
        if not self.known:
            return f"client {UNKNOWN} (no {CLIENT_IMAGE_KEY} in the result: its sampling was the client's default)"
        sampling = "temperature " + ("?" if self.temperature is None else f"{self.temperature:g}")
        sampling += ", seed " + ("?" if self.seed is None else str(self.seed))
        return f"vLLM {self.vllm_version or '?'} ({self.image}), {sampling}"


def metadata(client: BenchClient) -> dict[str, str]:
    """The ``--metadata`` that records ``client`` and :data:`SAMPLING` in the saved JSON."""
    return {
        CLIENT_IMAGE_KEY: client.image,
        CLIENT_VLLM_KEY: client.vllm_version,
        TEMPERATURE_KEY: f"{TEMPERATURE:g}",
        SEED_KEY: str(SEED),
    }


def client_info(data: Mapping[str, object]) -> ClientInfo:
    """The :class:`ClientInfo` of a saved result's top-level keys (values that do not read as
    their type are ``None``: vLLM stores ``--metadata`` values as strings)."""

    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) and value else None

    temperature: float | None = None
    seed: int | None = None
    try:
        raw = text(TEMPERATURE_KEY)
        temperature = float(raw) if raw is not None and math.isfinite(float(raw)) else None
    except ValueError:
        temperature = None
    raw = text(SEED_KEY)
    seed = int(raw) if raw is not None and raw.lstrip("-").isdigit() else None
    return ClientInfo(text(CLIENT_IMAGE_KEY), text(CLIENT_VLLM_KEY), temperature, seed)


def mismatch(mine: ClientInfo, theirs: ClientInfo) -> str | None:
    """Why two results cannot be compared for their clients, or ``None``.

    Two known clients that differ (image, or sampling) are not compared: a regression between
    them may be the client's. A result whose client is unknown is compared (results of an
    older rocmfleet), and :func:`rocmfleet.fleet.bench.verdicts.judge` says so in its notes.
    """
    if not (mine.known and theirs.known):
        return None
    if mine.image != theirs.image:
        return f"client {theirs.describe()} vs this run's {mine.describe()}"
    if (mine.temperature, mine.seed) != (theirs.temperature, theirs.seed):
        return f"sampling {theirs.describe()} vs this run's {mine.describe()}"
    return None


def client_json(info: ClientInfo) -> dict[str, object]:
    """``{"image", "vllm_version", "temperature", "seed"}`` of ``info`` for JSON reports (``None``: not recorded)."""
    return {"image": info.image, "vllm_version": info.vllm_version, "temperature": info.temperature, "seed": info.seed}


def client_container(instance: str) -> str:
    """The client container's name for ``instance``: ``rocmfleet-bench-<instance>``."""
    return CLIENT_PREFIX + instance
