"""Read Prometheus ``/metrics`` of a host's ports in one command, and parse what came back.

The host side is ``rocmfleet/scripts/metrics-read.sh PORT...``; the text is parsed with
``prometheus_client``'s parser (the Prometheus text exposition format), not by hand.

Example::

    out = run(scripts.command("metrics-read.sh", 8000, 5000))
    pages = split(out)            # {8000: Page(port=8000, error=None, text="# HELP ...")}
    families(pages[8000].text)    # {"vllm:num_requests_running", ...}
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from rocmfleet import scripts

#: The header ``metrics-read.sh`` writes before each port's body.
_HEADER = re.compile(r"^# rocmfleet-metrics (\d+) (.*)$")


@dataclass(frozen=True)
class Page:
    """One port's ``/metrics``: its text, or why it could not be read (``error``)."""

    port: int
    text: str = ""
    error: str | None = None


def command(ports: list[int]) -> str:
    """The shell command that reads ``ports``' ``/metrics`` on a host (``metrics-read.sh``)."""
    return scripts.command("metrics-read.sh", *ports)


def split(output: str) -> dict[int, Page]:
    """Split ``metrics-read.sh``'s output into one :class:`Page` per port.

    Args:
        output: the script's stdout (any exit code: a port that did not answer is a page with
            ``error`` set).

    Returns:
        Pages by port, in the order read; a port absent from the output is absent here.
    """
    pages: dict[int, Page] = {}
    port: int | None = None
    status = ""
    lines: list[str] = []

    def close() -> None:
        if port is not None:
            pages[port] = Page(port, "\n".join(lines) + "\n") if status == "ok" else Page(port, error=status)

    for line in output.splitlines():
        header = _HEADER.match(line)
        if header:
            close()
            port, status, lines = int(header.group(1)), header.group(2), []
        elif port is not None:
            lines.append(line)
    close()
    return pages


def samples(text: str) -> list[Sample]:
    """Every sample of a ``/metrics`` text (histogram buckets, ``_sum`` and ``_count`` included).

    Raises:
        ValueError: the text is not the Prometheus text format.
    """
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def families(text: str) -> set[str]:
    """The metric family names a ``/metrics`` text declares or has samples of.

    A counter's family is named without ``_total`` by ``prometheus_client``'s parser; both forms
    are returned, so ``vllm:request_success_total`` and ``vllm:request_success`` are found.

    Raises:
        ValueError: the text is not the Prometheus text format.
    """
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        if family.type == "counter":
            names.add(family.name + "_total")
        names.update(sample.name for sample in family.samples)
    return names
