"""One composite fact for what a role manages: files, units, packages, sysctls, images, readiness.

A no-op converge costs one SSH command per fact read (about 10 ms of control-side CPU each in
paramiko, issue 16), so a role reads the state of everything it manages in one command,
``rocmfleet/scripts/state.sh``, and calls pyinfra's operations only for the items that differ
(:mod:`rocmfleet.plan.hoststate`). The script prints one JSON object per line, parsed here with
pydantic.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from pyinfra.api.exceptions import FactProcessError
from pyinfra.api.facts import FactBase

from rocmfleet import scripts


class PathState(BaseModel):
    """One path: ``type`` is ``file``, ``dir``, ``link``, ``other`` or ``missing``; ``mode`` octal
    digits as ``stat -c %a`` prints them (``"644"``); ``sha256`` only for a regular file."""

    kind: Literal["path"]
    path: str
    type: Literal["file", "dir", "link", "other", "missing"]
    mode: str | None = None
    user: str | None = None
    group: str | None = None
    gid: str | None = None
    sha256: str | None = None


class UnitState(BaseModel):
    """A systemd unit's ``LoadState``, ``ActiveState`` and ``UnitFileState`` (``systemctl show``)."""

    kind: Literal["unit"]
    unit: str
    load: str
    active: str
    enabled: str


class PackageState(BaseModel):
    """A package as dpkg knows it: ``status`` is ``db:Status-Abbrev`` (``"ii "`` installed)."""

    kind: Literal["pkg"]
    package: str
    status: str
    version: str


class SysctlState(BaseModel):
    """A sysctl's live value (``None``: the kernel lacks it) and whether ``/proc/sys`` lets us write it."""

    kind: Literal["sysctl"]
    key: str
    value: str | None
    writable: bool = False


class OsState(BaseModel):
    """``/etc/os-release`` ``ID``, ``VERSION_ID``, ``VERSION_CODENAME`` and ``uname -r``."""

    kind: Literal["os"]
    id: str
    version_id: str
    codename: str
    kernel: str


class ImageState(BaseModel):
    kind: Literal["image"]
    image: str
    id: str | None


class MarkedFile(BaseModel):
    kind: Literal["marked"]
    glob: str
    path: str


class ReadyState(BaseModel):
    """Exit status of ``vllm-probe.sh`` (``live``: 0 serving, 1 not; ``ready``: 0 ready, 1 not yet,
    3 wrong answer)."""

    kind: Literal["ready"]
    key: str
    rc: int


class TextLine(BaseModel):
    """One line of a file (``text``) or of a script's output (``run``), in order, under ``key``."""

    kind: Literal["text", "run"]
    key: str
    text: str


class RanState(BaseModel):
    """Exit status of the script ``run`` ran under ``key`` (124: it timed out)."""

    kind: Literal["ran"]
    key: str
    rc: int


class ErrorLine(BaseModel):
    kind: Literal["error"]
    message: str


class EndLine(BaseModel):
    kind: Literal["end"]


_LINE = TypeAdapter(
    Annotated[
        PathState
        | UnitState
        | PackageState
        | SysctlState
        | OsState
        | ImageState
        | MarkedFile
        | ReadyState
        | TextLine
        | RanState
        | ErrorLine
        | EndLine,
        Field(discriminator="kind"),
    ]
)


@dataclass
class Gathered:
    """What ``state.sh`` found, by item. An item absent from its mapping is unknown (the script
    could not read it, e.g. ``systemctl`` without systemd): roles treat unknown as differing.

    Attributes:
        paths: ``{path: PathState}`` (``type="missing"`` for a path that does not exist).
        units: ``{unit: UnitState}``.
        packages: ``{name: PackageState}``; a package dpkg does not know is absent.
        sysctls: ``{key: SysctlState}``.
        os: the host's OS and running kernel, when asked for.
        images: ``{reference: image id or None}``.
        marked: ``{glob: [paths whose first line is the marker]}`` (a glob nothing matched is absent).
        ready: ``{key: probe exit status}``.
        texts: ``{path: lines}`` of the files asked for (a missing file is absent).
        runs: ``{name: (exit status, output lines)}`` of the scripts asked for.
    """

    paths: dict[str, PathState] = field(default_factory=dict)
    units: dict[str, UnitState] = field(default_factory=dict)
    packages: dict[str, PackageState] = field(default_factory=dict)
    sysctls: dict[str, SysctlState] = field(default_factory=dict)
    os: OsState | None = None
    images: dict[str, str | None] = field(default_factory=dict)
    marked: dict[str, list[str]] = field(default_factory=dict)
    ready: dict[str, int] = field(default_factory=dict)
    texts: dict[str, list[str]] = field(default_factory=dict)
    runs: dict[str, tuple[int, list[str]]] = field(default_factory=dict)


T = TypeVar("T")


def ran(got: Gathered, name: str, process: Callable[[list[str]], T]) -> T | None:
    """The run ``name`` of ``got`` parsed by ``process`` (a fact's), or ``None`` when it did not
    run, exited non-zero (124: timed out) or printed what ``process`` refuses (``ValueError``,
    ``IndexError`` or ``KeyError``; nothing is raised)."""
    found = got.runs.get(name)
    if found is None or found[0] != 0:
        return None
    try:
        return process(found[1])
    except (ValueError, IndexError, KeyError):
        return None


def parse_state(lines: Sequence[str]) -> Gathered:
    """:class:`Gathered` from ``state.sh`` output lines.

    Args:
        lines: the script's stdout lines, the last one ``{"kind": "end"}``.

    Raises:
        ValueError: output cut short (no end line), a line that is not one of the known JSON
            objects, or an ``error`` line (an item kind the script does not know).
    """
    items = [line for line in lines if line.strip()]
    if not items or items[-1].strip() != '{"kind":"end"}':
        raise ValueError(f"state.sh output cut short (no end line): {items[-1] if items else '(empty)'!r}")
    gathered = Gathered()
    output: dict[str, list[str]] = {}
    for line in items[:-1]:
        try:
            item = _LINE.validate_json(line)
        except ValidationError as exc:
            raise ValueError(f"state.sh printed an unknown line {line!r}: {exc.errors()[0]['msg']}") from exc
        match item:
            case PathState():
                gathered.paths[item.path] = item
            case UnitState():
                gathered.units[item.unit] = item
            case PackageState():
                gathered.packages[item.package] = item
            case SysctlState():
                gathered.sysctls[item.key] = item
            case OsState():
                gathered.os = item
            case ImageState():
                gathered.images[item.image] = item.id
            case MarkedFile():
                gathered.marked.setdefault(item.glob, []).append(item.path)
            case ReadyState():
                gathered.ready[item.key] = item.rc
            case TextLine(kind="text"):
                gathered.texts.setdefault(item.key, []).append(item.text)
            case TextLine():
                output.setdefault(item.key, []).append(item.text)
            case RanState():
                gathered.runs[item.key] = (item.rc, output.pop(item.key, []))
            case ErrorLine():
                raise ValueError(f"state.sh: {item.message}")
            case _:
                raise ValueError(f"state.sh printed a second end line before the last: {line!r}")
    return gathered


#: The run of :func:`state_args`'s ``apt_versions``: ``apt-cache madison`` of every package asked.
APT_VERSIONS = "apt-versions"


def apt_madison(packages: Sequence[str]) -> str:
    """``apt-cache madison`` of ``packages`` (in order, without repeats): one line per version apt
    offers, ``PACKAGE | VERSION | REPOSITORY LINE``; nothing, not a failure, where apt knows none."""
    return "apt-cache madison " + " ".join(shlex.quote(p) for p in dict.fromkeys(packages)) + " 2>/dev/null || true"


def state_args(
    paths: Sequence[str] = (),
    globs: Sequence[str] = (),
    units: Sequence[str] = (),
    packages: Sequence[str] = (),
    sysctls: Sequence[str] = (),
    images: Sequence[str] = (),
    marked: tuple[str, Sequence[str]] | None = None,
    ready: Sequence[tuple[str, Sequence[object]]] = (),
    os: bool = False,
    texts: Sequence[str] = (),
    runs: Sequence[tuple[str, str]] = (),
    apt_versions: Sequence[str] = (),
) -> list[str]:
    """The arguments of ``state.sh`` for these items (see the script's header).

    ``marked`` is ``(marker line, globs)``; ``ready`` is ``[(key, vllm-probe.sh arguments)]``
    (``rocmfleet.domain.readiness.live_args``, or ``ready`` with its arguments); ``os`` asks for the OS and kernel;
    ``texts`` are files read whole; ``runs`` is ``[(name, shell script)]``, run under ``timeout 20``;
    ``apt_versions`` are packages whose versions apt offers, every role's in one ``apt-cache madison``
    (the run :data:`APT_VERSIONS`: apt loads its cache once, about 20 ms of the host's time, issue 43).
    """
    args: list[str] = ["os", "-"] if os else []
    for kind, values in (
        ("path", paths),
        ("glob", globs),
        ("unit", units),
        ("pkg", packages),
        ("sysctl", sysctls),
        ("image", images),
        ("text", texts),
    ):
        for value in values:
            args += [kind, value]
    for name, script in runs:
        args += ["script", script, "run", name]
    if apt_versions:
        args += ["script", apt_madison(apt_versions), "run", APT_VERSIONS]
    if marked:
        args += ["marker", marked[0]]
        for glob in marked[1]:
            args += ["marked", glob]
    if ready:
        args += ["probe", scripts.text("vllm-probe.sh")]
        for key, probe_args in ready:
            args += ["ready", key, str(len(probe_args)), *(str(a) for a in probe_args)]
    return args


class HostState(FactBase[Gathered]):
    """
    The state of many managed items in one command (``rocmfleet/scripts/state.sh``): type, mode,
    owner and SHA-256 of ``paths`` (and of every path matching ``globs``), ``systemctl show`` of
    ``units``, ``dpkg-query`` of ``packages``, ``sysctl -n`` of ``sysctls``, local ``images``, files
    carrying a ``marked`` first line, and the ``ready`` probes of vLLM instances.

    .. code:: python

        got = host.get_fact(HostState, paths=["/etc/rocmfleet/vllm"], units=["docker.service"])
        got.paths["/etc/rocmfleet/vllm"].mode, got.units["docker.service"].active  # "700", "active"

    Arguments as :func:`state_args`. Without output (the command failed) everything is unknown.
    """

    @staticmethod
    def default() -> Gathered:
        return Gathered()

    def command(
        self,
        paths: Sequence[str] = (),
        globs: Sequence[str] = (),
        units: Sequence[str] = (),
        packages: Sequence[str] = (),
        sysctls: Sequence[str] = (),
        images: Sequence[str] = (),
        marked: tuple[str, Sequence[str]] | None = None,
        ready: Sequence[tuple[str, Sequence[object]]] = (),
        os: bool = False,
        texts: Sequence[str] = (),
        runs: Sequence[tuple[str, str]] = (),
        apt_versions: Sequence[str] = (),
    ) -> str:
        args = state_args(paths, globs, units, packages, sysctls, images, marked, ready, os, texts, runs, apt_versions)
        return scripts.command("state.sh", *args)

    def process(self, output: list[str]) -> Gathered:
        try:
            return parse_state(output)
        except ValueError as exc:
            raise FactProcessError(str(exc)) from exc
