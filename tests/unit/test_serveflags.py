"""The per-release table of ``vllm serve`` flags (``rocmfleet/domain/vllm_serve_flags.json``, read
from the PyPI sdists by ``tools/vllm_serve_flags.py``), checked against the flag table that was
built by hand from the same sources (``rocmfleet/domain/flags.py``)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from rocmfleet.domain import flags, serveflags

RELEASES, _ = serveflags._table()


def sampled(since: str, until: str | None) -> list[str]:
    return [r for r in RELEASES if Version(since) <= Version(r) and (until is None or Version(r) < Version(until))]


def test_every_flag_the_table_renders_is_a_flag_of_each_release_it_renders_for():
    for row in flags.FLAGS:
        if row.kind == "arg" and row.name:
            missing = [r for r in sampled(row.since, row.until) if row.name not in serveflags.serve_flags(r)]
            assert not missing, (row.name, missing)


def test_every_removed_flag_is_gone_from_the_release_that_dropped_it():
    for removed in flags.REMOVED:
        if removed.name.startswith("-"):
            assert removed.name not in serveflags.serve_flags(removed.gone), removed.name
            assert removed.name in serveflags.serve_flags("0.9.2"), removed.name


def test_a_release_without_an_sdist_takes_the_flags_of_both_neighbours():
    assert "0.15.0" not in RELEASES  # no sdist on PyPI
    assert serveflags.serve_flags("0.15.0") == serveflags.serve_flags("0.14.1") | serveflags.serve_flags("0.16.0")


@pytest.mark.parametrize(
    ("flag", "problem"),
    [
        ("--enforce-eager", None),
        ("--enforce-eag", None),  # an abbreviation of one flag: argparse takes it
        ("--num-scheduler-steps", None),  # removed in 0.10.1, a flag of 0.9.2
        ("--async-scheduling", "vLLM 0.10.0 and later have it"),
        ("--max-num", None),  # a prefix of several: vLLM's to refuse, the table holds more names than serve
        ("--", "not a flag"),
        ("--enable-", "not a flag"),
        ("--max-model-length", "did you mean --max-model-len?"),
        ("--qwerty", "has no such flag (vllm serve would refuse to start)"),
    ],
)
def test_a_flag_the_release_does_not_have_is_refused(flag, problem):
    found = serveflags.unknown_flag_problem(flag, flag, "0.9.2")
    assert found is None if problem is None else problem in found


def test_0_33_pairs_every_enable_flag_with_a_disable_flag():
    # vllm-0.33.0 vllm/utils/argparse_utils.py EnableDisableAction; its own errors advise
    # --disable-prefix-caching (vllm/config/vllm.py).
    for flag in ("--disable-prefix-caching", "--disable-chunked-prefill", "--enable-custom-all-reduce"):
        assert serveflags.unknown_flag_problem(flag, flag, "0.33.0") is None, flag
    assert serveflags.unknown_flag_problem("--disable-prefix-caching", "x", "0.32.0") is not None
