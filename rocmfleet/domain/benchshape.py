"""The smoke benchmark's shape, a profile's ``bench:`` settings: cases, sweeps and thresholds.

Pure domain data (no I/O): what :mod:`rocmfleet.fleet.bench.bench` runs and judges, what the
warm-up (:mod:`rocmfleet.domain.warmup`) sends, and the ``bench`` section a profile
(:mod:`rocmfleet.config.profiles`) composes. The profile is read through :class:`BenchTarget`, so
this module never imports the configuration layer.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

#: AMD's published ISL/OSL pairs (input tokens, output tokens), run at concurrency 64 (issue 6).
AMD_PAIRS: tuple[tuple[int, int], ...] = ((2000, 150), (1000, 1000), (5000, 1000), (10000, 1000), (3200, 800))
AMD_CONCURRENCY = 64
#: Bounds of the benchmark's numbers: the longest served context (as ``max_model_len`` in
#: :mod:`rocmfleet.domain.flags`) and the largest ``max_num_seqs`` it accepts.
MAX_TOKENS = 10_485_760
MAX_CONCURRENCY = 65_536
#: A token count of a benchmark case (strict: a whole number, at most :data:`MAX_TOKENS`).
_Tokens = Annotated[int, Strict(), Field(le=MAX_TOKENS)]

#: A case's name, ``<isl>x<osl>-c<concurrency>`` (a result file's stem).
CASE_NAME = re.compile(r"^(\d+)x(\d+)-c(\d+)$")


@dataclass(frozen=True, order=True)
class Case:
    """One benchmark point: random prompts of ``isl`` tokens asking for ``osl`` tokens each."""

    isl: int
    osl: int
    concurrency: int
    num_prompts: int = field(default=0, compare=False)

    @property
    def name(self) -> str:
        """``<isl>x<osl>-c<concurrency>``: the result file's stem."""
        return f"{self.isl}x{self.osl}-c{self.concurrency}"

    @classmethod
    def from_name(cls, name: str) -> Case:
        """The case a result file's stem names (``num_prompts`` unknown: 0).

        Raises:
            ValueError: ``name`` is not ``<isl>x<osl>-c<concurrency>``.
        """
        match = CASE_NAME.fullmatch(name)
        if not match:
            raise ValueError(f"not a case name (<isl>x<osl>-c<concurrency>): {name!r}")
        return cls(*(int(g) for g in match.groups()))


class BenchShape(BaseModel):
    """What a profile benchmarks: AMD's sweep by default, scaled down for small setups.

    Lengths are multiplied by ``length_scale``, then shrunk together (keeping their ratio) so
    that ``isl + osl <= max_model_len - reserve_tokens``, since vLLM refuses a request whose
    prompt plus ``max_tokens`` exceeds ``--max-model-len``. Concurrencies are multiplied by
    ``concurrency_scale`` and capped at ``max_concurrency``.
    """

    model_config = ConfigDict(extra="forbid", strict=True)  # "8" or true is no count

    # Upper bounds: a smoke benchmark runs between deploys, so its cases stay few and bounded by
    # what a server can take: lengths by the longest served context (10M tokens, the same bound as
    # max_model_len in rocmfleet.domain.flags), concurrency by vLLM's largest max_num_seqs bound (65536).
    # Strict(False) on the pair only: YAML gives a list, not a tuple; its numbers stay strict.
    pairs: list[Annotated[tuple[_Tokens, _Tokens], Strict(False)]] = Field(
        default=list(AMD_PAIRS),
        min_length=1,
        max_length=64,
        description="(input tokens, output tokens) of each case; at most 64 cases",
    )
    concurrencies: list[Annotated[int, Field(le=MAX_CONCURRENCY)]] = Field(
        default=[AMD_CONCURRENCY],
        min_length=1,
        max_length=64,
        description="`--max-concurrency` values; several: a sweep (at most 64)",
    )
    length_scale: float = Field(default=1.0, gt=0, le=1)
    concurrency_scale: float = Field(default=1.0, gt=0, le=1)
    max_model_len: int | None = Field(
        default=None, ge=8, le=MAX_TOKENS, description="the served `--max-model-len`, tokens"
    )
    max_concurrency: int | None = Field(
        default=None, ge=1, le=MAX_CONCURRENCY, description="cap, e.g. the served `--max-num-seqs`"
    )
    prompts_per_slot: int = Field(
        default=4,
        ge=1,
        le=100,
        description="`--num-prompts` = concurrency x this (rocmfleet's choice: ~4 waves; at most 100 waves)",
    )
    reserve_tokens: int = Field(
        default=16,
        ge=0,
        le=4096,
        description="kept free below max_model_len: a random prompt can re-tokenize longer (at most 4096)",
    )

    @model_validator(mode="after")
    def _positive(self) -> BenchShape:
        bad = [p for p in self.pairs if p[0] < 1 or p[1] < 1] + [c for c in self.concurrencies if c < 1]
        if bad:
            raise ValueError(f"lengths and concurrencies must be >= 1: {bad}")
        if self.max_model_len is not None and self.max_model_len - self.reserve_tokens < 3:
            raise ValueError(f"max_model_len {self.max_model_len} leaves no room after reserve_tokens")
        return self


def served_problems(bench: BenchShape, max_model_len: int | None, max_num_seqs: int | None) -> list[str]:
    """Where a profile's ``bench:`` section asks more than its instances serve.

    Args:
        bench: the profile's ``bench:`` section.
        max_model_len: the served context, tokens (the profile's ``max_model_len``, else the
            model's ``max_position_embeddings``); None when unknown.
        max_num_seqs: the served ``--max-num-seqs``; None when vLLM's default.

    Returns:
        One line per problem, ``bench.<key> <value> ...``. vLLM refuses a request whose prompt
        plus ``max_tokens`` exceeds ``--max-model-len`` (vllm-0.33.0
        ``vllm/entrypoints/openai/serving_engine.py``, ``_validate_input``), so a shape fitted to a
        longer context fails every request; requests beyond ``--max-num-seqs`` wait in the
        scheduler's queue, so their TTFT measures the queue, not the server.
    """
    problems = []
    if bench.max_model_len is not None and max_model_len is not None and bench.max_model_len > max_model_len:
        problems.append(
            f"bench.max_model_len {bench.max_model_len} exceeds the {max_model_len} tokens the instances serve: "
            "vLLM refuses every request longer than its --max-model-len; leave it out (the served one is used)"
        )
    if bench.max_concurrency is not None and max_num_seqs is not None and bench.max_concurrency > max_num_seqs:
        problems.append(
            f"bench.max_concurrency {bench.max_concurrency} exceeds max_num_seqs {max_num_seqs}: the requests beyond "
            "it queue and their TTFT measures the queue; leave it out (max_num_seqs is used)"
        )
    return problems


def shape_for(profile: BenchTarget, **overrides: Any) -> BenchShape:
    """A :class:`BenchShape` capped by ``profile``'s ``max_model_len`` and ``max_num_seqs``.

    The keys the profile's ``bench:`` section sets (:class:`BenchSettings`) win over those caps
    and AMD's defaults; ``overrides`` win over everything.
    """
    own = profile.bench.model_dump(exclude_unset=True, exclude={"thresholds"})
    return BenchShape.model_validate(
        {"max_model_len": profile.max_model_len, "max_concurrency": profile.max_num_seqs, **own, **overrides}
    )


def _fit(isl: int, osl: int, shape: BenchShape) -> tuple[int, int]:
    """Scaled lengths; shrunk proportionally to fit the model's context. At least 1 in, 2 out (TPOT)."""
    isl, osl = max(1, round(isl * shape.length_scale)), max(2, round(osl * shape.length_scale))
    if shape.max_model_len is not None:
        room = shape.max_model_len - shape.reserve_tokens
        if isl + osl > room:
            factor = room / (isl + osl)
            osl = max(2, math.floor(osl * factor))
            isl = max(1, min(math.floor(isl * factor), room - osl))
    return isl, osl


def sweep_for(shape: BenchShape | None = None) -> list[Case]:
    """The cases of ``shape`` (default: AMD's sweep unscaled), in order, without duplicates."""
    shape = shape or BenchShape()
    cases: list[Case] = []
    for concurrency in shape.concurrencies:
        conc = max(1, round(concurrency * shape.concurrency_scale))
        if shape.max_concurrency is not None:
            conc = min(conc, shape.max_concurrency)
        for isl, osl in shape.pairs:
            case = Case(*_fit(isl, osl, shape), conc, conc * shape.prompts_per_slot)
            if case not in cases:
                cases.append(case)
    return cases


class Thresholds(BaseModel):
    """Pass/fail limits of a profile's smoke benchmark; ``None``: that limit is not checked."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "8" or true is no count

    # Upper bounds: a request slower than an hour is a hung server, not a threshold; 10M tokens/s is
    # far above any single server's output throughput.
    ttft_p99_ms: float | None = Field(
        default=None, gt=0, le=3_600_000, description="highest p99 time to first token, ms (at most an hour)"
    )
    tpot_p99_ms: float | None = Field(
        default=None, gt=0, le=3_600_000, description="highest p99 time per output token, ms (at most an hour)"
    )
    min_output_throughput_tok_s: float | None = Field(
        default=None, ge=0, le=10_000_000, description="lowest output token throughput, tokens/s"
    )
    max_failed: int = Field(default=0, ge=0, le=1_000_000, description="most failed requests")
    regression_tolerance: float = Field(
        default=0.10, ge=0, lt=1, description="how much worse than the baseline a metric may be, as a fraction"
    )


class BenchSettings(BenchShape):
    """A profile's ``bench:`` section: its cases (:class:`BenchShape` keys) and :class:`Thresholds`.

    Every key is optional: an empty section runs AMD's sweep (capped by the profile's
    ``max_model_len`` and ``max_num_seqs``, :func:`shape_for`) with the default thresholds
    (no failed request; 10% regression tolerance). Example, a small lab:

    .. code:: yaml

        bench:
          pairs: [[2000, 150]]
          length_scale: 0.05
          concurrencies: [4]
          thresholds: {regression_tolerance: 0.5}
    """

    thresholds: Thresholds = Field(default_factory=Thresholds, description="pass/fail limits of each case")


class BenchTarget(Protocol):
    """What :func:`shape_for` reads of a profile (:class:`rocmfleet.config.profiles.Profile` has it)."""

    @property
    def bench(self) -> BenchSettings: ...

    @property
    def max_model_len(self) -> int | None: ...

    @property
    def max_num_seqs(self) -> int | None: ...
