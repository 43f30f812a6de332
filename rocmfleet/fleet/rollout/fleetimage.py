"""The fleet's image: an image pinned on the hosts (:func:`rocmfleet.fleet.inventory.load_targets`
loads them) and the group data file that pins it (edited by a rollout's ``--image``, put back when
it fails). :class:`CommandError`: a command that cannot start (exit 2). Its digest from the
registry, asked with the hosts' registry settings, and a host with an image pinned are
:mod:`rocmfleet.fleet.rollout.targetimage`'s (this module takes no host's configuration).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from rocmfleet.config import groupvars
from rocmfleet.config.groupdata_edit import IMAGE_KEYS, EditError, holders, parse, set_keys, unified_diff, unset_keys
from rocmfleet.config.profiles import Image
from rocmfleet.fleet.registry import parse_image
from rocmfleet.fleet.rollout.progress import Emit, to_stderr
from rocmfleet.fleet.rollout.state import DataEdit, ImageRef


class CommandError(RuntimeError):
    """The command cannot start (exit 2); the message says why."""


class Unconfirmed(CommandError):
    """The registry did not say the digest (unreachable, or it answered an error); ``why`` says
    which, e.g. ``registry unreachable (https://reg/v2/...: Connection refused)``. ``rollout --dry``
    prints the plan with it; a start is refused (exit 2)."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(message)
        self.why = why


def _pinned(text: str, path: str, running: Collection[Image] = ()) -> str:
    """What a group file pins: ``repository:tag@digest`` when it sets all three; else what it sets and,
    for each key it leaves out, what its hosts run (``running``: their images), e.g. ``tag 1.0, digest
    sha256:... (no vllm_image_repository here: its hosts get docker.io/vllm/x from their profile or
    another file)``, or that they are not known."""
    data = parse(text, path)
    fields = dict(zip(IMAGE_KEYS, ("repository", "tag", "digest"), strict=True))
    if all(k in data for k in IMAGE_KEYS):
        return f"{data[IMAGE_KEYS[0]]}:{data[IMAGE_KEYS[1]]}@{data[IMAGE_KEYS[2]]}"
    sets = ", ".join(f"{fields[k]} {data[k]}" for k in IMAGE_KEYS if k in data)
    missing = []
    for key in (k for k in IMAGE_KEYS if k not in data):
        values = sorted({str(getattr(image, fields[key])) for image in running})
        got = f"its hosts get {' or '.join(values)}" if values else "its hosts get it"
        missing.append(f"no {key} here: {got} from their profile or another file")
    return f"{sets} ({'; '.join(missing)})"


def _names(loaded: groupvars.GroupFile) -> list[str]:
    """The inventory groups a group file gives data to: the names its load is assigned to, else its stem."""
    return list(groupvars.assigned_to(loaded)) or [loaded.group]


def pinned_by(groups: Collection[str]) -> list[str]:
    """The group data files (as loaded, in load order) that set ``vllm_image_*`` for any of
    ``groups`` (inventory groups; ``all``'s file for any), each as ``FILE (GROUP, ...)``: where a
    host of those groups has its image from, unless its own data or the inventory file pins it."""
    loaded = [g for g in groupvars.LOADED if not g.fatal]
    files = {str(g.path): g.path.read_text() for g in loaded}
    found = holders(files)
    return [
        f"{groupvars.display(g.path)} ({', '.join(_names(g))})"
        for g in loaded
        if str(g.path) in found and set(_names(g)) & {*groups, "all"}  # every host is in group all
    ]


def image_lines(wanted: Mapping[str, ImageRef], groups_of: Mapping[str, Collection[str]]) -> list[str]:
    """Which image(s) a rollout without ``--image`` rolls: one ``image: REF on N host(s), pinned by
    FILE (GROUPS)`` line per distinct image of ``wanted`` (``{host: the image its data pins}``, in
    inventory order), its files from :func:`pinned_by` over those hosts' groups (``host data or the
    inventory file`` when no group file does)."""
    by_image: dict[str, list[str]] = {}
    for name, ref in wanted.items():
        by_image.setdefault(ref.reference, []).append(name)
    said = []
    for reference, names in by_image.items():
        files = pinned_by({g for n in names for g in groups_of.get(n, ())})
        said.append(
            f"image: {reference} on {len(names)} host(s), pinned by {'; '.join(files) or 'host data or the inventory'}"
        )
    return said


def unconfirmed_ref(reference: str) -> ImageRef:
    """``REPO:TAG[@DIGEST]`` as ``rollout --dry`` shows it when the registry did not confirm the
    digest: the given digest, or ``<not confirmed>`` in its place (never recorded or written).

    Raises:
        CommandError: a malformed reference.
    """
    try:
        name = parse_image(reference)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    return ImageRef(repository=name.repository, tag=name.tag, digest=name.digest or "<not confirmed>")


def pin_file(
    group: str | None = None,
    groups_of: Mapping[str, Collection[str]] | None = None,
    images: Mapping[str, Image] | None = None,
) -> tuple[Path, str]:
    """Which group data file takes the image, and its text now (read from the files the inventory
    loaded; nothing is connected to).

    Args:
        group: ``--group``: the inventory group whose file's pin is rolled (a site that pins the
            image per group); ``None``: the one file that pins it for the whole fleet.
        groups_of, images: ``{host: its groups}`` and ``{host: its image}``: a refusal names, for a
            key a pinning file leaves out, the value its groups' hosts run (``None``: says it is not there).

    Raises:
        CommandError: several files pin the image and no ``group`` is given (each file, its groups
            and its image named); ``group``'s files pin no image; no file to put the pin in.
    """
    loaded = [g for g in groupvars.LOADED if not g.fatal]  # every group file the inventory read, in order
    files = {str(g.path): g.path.read_text() for g in loaded}
    found = holders(files)

    known = images or {}

    def running(names: list[str]) -> list[Image]:
        return [known[h] for h, groups in (groups_of or {}).items() if set(names) & {*groups, "all"} and h in known]

    pins = "; ".join(
        f"{', '.join(_names(g))} ({g.path}): {_pinned(files[str(g.path)], str(g.path), running(_names(g)))}"
        for g in loaded
        if str(g.path) in found
    )
    if group is not None:
        mine = [str(g.path) for g in loaded if group in _names(g) and str(g.path) in found]
        if len(mine) != 1:
            said = "no group file of it sets vllm_image_*" if not mine else f"{', '.join(mine)} all set vllm_image_*"
            raise CommandError(
                f"--group {group}: {said}; the image is pinned by: {pins or 'no group file'}; "
                "name a group whose file pins it"
            )
        found = mine
    elif len(found) > 1:
        raise CommandError(
            f"the image is pinned per group, in more than one group data file: {pins}; "
            "roll one group's pin at a time with --image REF --group NAME"
        )
    if not found:
        groups = {g.group: str(g.path) for g in loaded}
        found = [v for g, v in groups.items() if g != "all"] or list(groups.values())
        if len(found) != 1:
            raise CommandError("no group data file holds vllm_image_*; add vllm_image_tag and vllm_image_digest to one")
    return Path(found[0]), files[found[0]]


def data_file(image: ImageRef, group: str | None = None) -> tuple[Path, str, str]:
    """:func:`pin_file`'s file, its text now and the text with ``image`` pinned.

    Raises:
        CommandError: as :func:`pin_file`, or the file cannot be edited.
    """
    path, text = pin_file(group)
    try:
        return path, text, set_keys(text, image.data(), str(path))
    except EditError as exc:
        raise CommandError(str(exc)) from None


def group_hosts(group: str, groups_of: Mapping[str, Collection[str]], option: str, inventory: str) -> list[str]:
    """The hosts of inventory group ``group`` among ``groups_of`` (``{host: its groups}``, in
    inventory order), in inventory order.

    Raises:
        CommandError: no host there is in it: ``option``, the group and the groups there are.
    """
    hosts = [name for name, groups in groups_of.items() if group in groups]
    if not hosts:
        known = sorted({g for groups in groups_of.values() for g in groups if g != "all"})
        raise CommandError(
            f"{option} {group}: no host of {inventory} is in that group; its groups: {', '.join(known) or 'none'}"
        )
    return hosts


def pinned_hosts(
    group: str | None,
    groups_of: Mapping[str, Collection[str]],
    images: Mapping[str, Image],
    inventory: str,
    emit: Emit,
) -> list[str]:
    """The hosts whose image the file :func:`pin_file` picks pins (``--image``, with ``--group``
    or without), and a line for each other one: a host in two groups that both pin the image runs
    the later group's pin, and one whose own data pins it runs that; an edit of the file leaves
    either as it is, so the rollout leaves that host alone (rolling it would leave it on an image
    its data does not say, which the next deploy puts back). A host is told apart by the values it
    runs: one whose other pin is the same as the file's today cannot be, and is rolled.

    Args:
        group: ``--group`` (its hosts); ``None``: every host of ``groups_of`` (the fleet-wide pin).
        groups_of: ``{host: its inventory groups}`` of the hosts the command covers, in inventory order.
        images: each of those hosts' image as its data pins it (``HostConfig.image``).

    Returns:
        the hosts in inventory order; ``emit`` is told ``HOST: ... its image is pinned elsewhere
        (REF): left out, ...`` for each host left out.

    Raises:
        CommandError: as :func:`group_hosts` and :func:`pin_file`, or every host is pinned
            elsewhere (nothing to roll).
    """
    hosts = group_hosts(group, groups_of, "--group", inventory) if group is not None else list(groups_of)
    path, text = pin_file(group, groups_of, images)
    try:
        data = parse(text, str(path))
    except EditError as exc:
        raise CommandError(str(exc)) from None
    fields = dict(zip(IMAGE_KEYS, ("repository", "tag", "digest"), strict=True))
    mine, lines = [], []
    where = f"in {group}, but " if group is not None else ""
    for name in hosts:
        image = images[name]
        if all(str(data[key]) == str(getattr(image, field)) for key, field in fields.items() if key in data):
            mine.append(name)
        else:
            lines.append(
                f"{name}: {where}its image is pinned elsewhere (a later group or its own data: "
                f"{image.reference}): left out, an edit of {path} does not change it"
            )
    if not mine:
        raise CommandError(f"{f'--group {group}: ' if group else ''}" + "; ".join(lines) + ": no host runs its pin")
    for line in lines:
        emit(line)
    return mine


def revert_data(edit: DataEdit, emit: Emit, error: Emit = to_stderr) -> Callable[[], None]:
    """What puts ``edit``'s group data file back as it was (the runner calls it when a rollout fails)."""

    def revert() -> None:
        path = Path(edit.path)
        try:
            old = path.read_text()
            new = set_keys(old, {k: v for k, v in edit.before.items() if v is not None}, edit.path)
            new = unset_keys(new, [k for k, v in edit.before.items() if v is None], edit.path)
        except (OSError, EditError) as exc:
            error(f"rocmfleet: could not put {edit.path} back: {exc}; set {edit.before} there by hand")
            return
        if new != old:
            path.write_text(new)
            emit(f"{edit.path} put back as before the rollout:\n{unified_diff(old, new, edit.path)}")

    return revert
