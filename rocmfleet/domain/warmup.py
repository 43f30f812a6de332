"""Warm-up requests: what makes every compiler of a vLLM instance do its work before users come.

vLLM compiles and captures CUDA/HIP graphs for a list of batch sizes at start-up, but Triton
kernels (attention, AITER's) are compiled and auto-tuned lazily, on the first request of each
shape. The warm-up plan sends, after the server is ready:

* the smoke benchmark's shapes (the profile's ``bench`` section, :func:`rocmfleet.domain.benchshape.sweep_for`):
  one request per concurrency slot, so prefill and decode run at the benchmark's sizes;
* one batch of each size vLLM captures graphs for (:func:`capture_sizes`): ``b`` concurrent short
  requests make the engine decode a batch of ``b``.

``rocmfleet cache bake`` runs it on the bake container; a profile with ``warmup_at_start: true``
runs it on every start before the instance counts as ready (:func:`rocmfleet.domain.readiness.wait_script`).
The requests are sent by ``rocmfleet/scripts/vllm-warmup.sh`` on the host.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rocmfleet import scripts
from rocmfleet.domain.benchshape import BenchTarget, shape_for, sweep_for

#: Prompt and output tokens of a capture-size step: short, so a step costs a few decode steps.
CAPTURE_ISL, CAPTURE_OSL = 16, 8
#: vLLM's ``max_num_seqs`` when the profile leaves it unset (vllm-0.33.0 vllm/engine/arg_utils.py:
#: 256 for the API server; some versions pick 1024 on large-memory GPUs, then sizes above 512 are
#: captured anyway but the cap below is reached).
DEFAULT_MAX_NUM_SEQS = 256
#: vLLM's largest default capture size (vllm/config/vllm.py ``set_cudagraph_sizes``:
#: ``max_graph_size = min(max_num_seqs * 2, 512)``).
MAX_CAPTURE = 512


@dataclass(frozen=True)
class Step:
    """``requests`` completions of ``isl`` prompt tokens and ``osl`` output tokens, ``concurrency`` at once."""

    isl: int
    osl: int
    concurrency: int
    requests: int

    def arg(self) -> str:
        """``ISL:OSL:CONCURRENCY:REQUESTS`` for ``vllm-warmup.sh``."""
        return f"{self.isl}:{self.osl}:{self.concurrency}:{self.requests}"


class Profile(BenchTarget, Protocol):
    """What the warm-up reads of a profile (:class:`rocmfleet.config.profiles.Profile` has it)."""

    @property
    def served_model_name(self) -> str: ...
    @property
    def cudagraph_mode(self) -> str | None: ...
    @property
    def extra_args(self) -> Sequence[str]: ...
    @property
    def max_num_batched_tokens(self) -> int | None: ...


def capture_sizes(profile: Profile) -> list[int]:
    """The batch sizes vLLM captures graphs for with ``profile``'s settings, ascending.

    vLLM's default list (vllm/config/vllm.py ``set_cudagraph_sizes``): ``[1, 2, 4]``, multiples of
    8 below 256, then multiples of 16 up to ``min(2 * max_num_seqs, 512)``; sizes above
    ``max_num_batched_tokens`` are dropped. None with ``cudagraph_mode: NONE`` or ``--enforce-eager``.
    """
    if profile.cudagraph_mode == "NONE" or "--enforce-eager" in profile.extra_args:
        return []
    largest = min(2 * (profile.max_num_seqs or DEFAULT_MAX_NUM_SEQS), MAX_CAPTURE)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    limit = profile.max_num_batched_tokens or largest
    return [s for s in sizes if s <= largest and s <= limit]


def plan(profile: Profile) -> list[Step]:
    """The warm-up steps of ``profile``: the smoke benchmark's cases, then each capture size."""
    steps = [Step(c.isl, c.osl, c.concurrency, c.concurrency) for c in sweep_for(shape_for(profile))]
    room = (profile.max_model_len or CAPTURE_ISL + CAPTURE_OSL) - CAPTURE_OSL
    isl = max(1, min(CAPTURE_ISL, room))
    steps += [Step(isl, CAPTURE_OSL, size, size) for size in capture_sizes(profile)]
    return list(dict.fromkeys(steps))


def args(profile: Profile, port: int) -> list[str]:
    """The arguments of ``vllm-warmup.sh`` for :func:`plan`'s requests to the server on ``127.0.0.1:port``."""
    return [str(port), json.dumps(profile.served_model_name), *(s.arg() for s in plan(profile))]


def script(profile: Profile, port: int) -> str:
    """Shell that sends :func:`plan`'s requests to the server on ``127.0.0.1:port``; exit 1 on a failure."""
    return scripts.command("vllm-warmup.sh", *args(profile, port))
