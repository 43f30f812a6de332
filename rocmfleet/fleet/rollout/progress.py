"""Where a rollout says what it does: plain lines (:class:`LineProgress`) or rich bars (:class:`RichProgress`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichBars

Emit = Callable[[str], None]


def to_stderr(line: str) -> None:
    """The default ``error`` of the commands: one line on stderr."""
    print(line, file=sys.stderr, flush=True)


class Progress(Protocol):
    """Where the runner says what it does (:class:`RichProgress`, or plain lines)."""

    def batch(self, index: int, total: int, hosts: Sequence[str], eta: float | None) -> None: ...
    def step(self, host: str, step: str) -> None: ...
    def host_done(self, host: str, ok: bool) -> None: ...
    def say(self, text: str) -> None: ...


@dataclass
class LineProgress:
    """Progress as plain lines (``emit``), with the elapsed time."""

    emit: Emit = print
    started: float = field(default_factory=time.monotonic)

    def _t(self) -> str:
        return f"[{time.monotonic() - self.started:7.1f}s]"

    def batch(self, index: int, total: int, hosts: Sequence[str], eta: float | None) -> None:
        left = f", about {eta / 60:.1f} min left" if eta is not None else ""
        self.emit(f"{self._t()} batch {index + 1}/{total}: {', '.join(hosts)}{left}")

    def step(self, host: str, step: str) -> None:
        self.emit(f"{self._t()} {host}: {step}")

    def host_done(self, host: str, ok: bool) -> None:
        self.emit(f"{self._t()} {host}: {'done' if ok else 'FAILED'}")

    def say(self, text: str) -> None:
        self.emit(f"{self._t()} {text}")


#: Makes the progress of a run of that many hosts (the CLI's: :class:`RichProgress` on a terminal).
ProgressFactory = Callable[[int], Progress]


class RichProgress:
    """Progress with rich: one bar for the hosts done (elapsed, time left), one line per host of the
    current batch with its step and elapsed time; messages above them. Use as a context manager."""

    def __init__(self, total_hosts: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.bars = RichBars(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.overall = self.bars.add_task("hosts", total=total_hosts)
        self.tasks: dict[str, TaskID] = {}
        self.batch_label = ""

    def __enter__(self) -> RichProgress:
        self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.stop()

    def batch(self, index: int, total: int, hosts: Sequence[str], eta: float | None) -> None:
        for task in self.tasks.values():
            self.bars.update(task, visible=False)
        self.batch_label = f"batch {index + 1}/{total}"
        left = f" (about {eta / 60:.1f} min left)" if eta is not None else ""
        self.bars.console.log(f"{self.batch_label}: {', '.join(hosts)}{left}")
        for host in hosts:
            self.tasks[host] = self.bars.add_task(f"  {self.batch_label} {host}: pending", total=None)

    def step(self, host: str, step: str) -> None:
        if host not in self.tasks:
            self.tasks[host] = self.bars.add_task(f"  {host}", total=None)
        self.bars.update(self.tasks[host], description=f"  {self.batch_label} {host}: {step}")

    def host_done(self, host: str, ok: bool) -> None:
        self.bars.advance(self.overall)
        self.bars.console.log(f"{host}: {'done' if ok else '[red]FAILED[/red]'}")

    def say(self, text: str) -> None:
        self.bars.console.log(text)
