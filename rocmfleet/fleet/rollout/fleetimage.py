"""The fleet's image: an image pinned on the hosts (:func:`rocmfleet.fleet.inventory.load_targets`
loads them), its digest from the registry, and the group data file that pins it (edited by a
rollout's ``--image``, put back when it fails). :class:`CommandError`: a command that cannot start
(exit 2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from rocmfleet.config import groupvars
from rocmfleet.config.groupdata_edit import EditError, holders, set_keys, unified_diff, unset_keys
from rocmfleet.fleet.registry import RegistryError, docker_config_credentials, parse_image, resolve_digest
from rocmfleet.fleet.rollout.progress import Emit, to_stderr
from rocmfleet.fleet.rollout.state import DataEdit, ImageRef
from rocmfleet.fleet.target import Target


class CommandError(RuntimeError):
    """The command cannot start (exit 2); the message says why."""


def with_image(target: Target, image: ImageRef) -> Target:
    """``target`` with ``image`` pinned in its configuration."""
    config = target.config
    pinned = config.image.model_copy(update={"repository": image.repository, "tag": image.tag, "digest": image.digest})
    return replace(target, config=replace(config, image=pinned))


def resolve(reference: str, targets: Mapping[str, Target]) -> ImageRef:
    """``REPO:TAG`` to an :class:`~rocmfleet.fleet.rollout.state.ImageRef`, the digest from the registry (once).

    The hosts' ``docker_insecure_registries`` say which registries speak plain HTTP, their
    ``docker_registry_auth`` the credentials, else the control machine's ``docker login``
    (:func:`~rocmfleet.fleet.registry.docker_config_credentials`).

    Raises:
        CommandError: a malformed reference or a registry that cannot say the digest.
    """
    try:
        name = parse_image(reference)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    insecure = sorted({r for t in targets.values() for r in t.config.settings.docker_insecure_registries})
    credentials = None
    for t in targets.values():
        for auth in t.config.settings.docker_registry_auth:
            if auth.registry in (name.registry, f"https://{name.registry}", f"http://{name.registry}"):
                credentials = (auth.username, auth.password.reveal())
    credentials = credentials or docker_config_credentials(name.registry)  # `docker login` on this machine
    try:
        digest = resolve_digest(name, insecure, credentials)
    except RegistryError as exc:
        raise CommandError(f"cannot resolve {reference}: {exc}") from None
    return ImageRef(repository=name.repository, tag=name.tag, digest=digest)


def data_file(image: ImageRef) -> tuple[Path, str, str]:
    """Which group data file takes the image, its text now and the edited text."""
    loaded = [g for g in groupvars.LOADED if not g.fatal]  # every group file the inventory read, in order
    files = {str(g.path): g.path.read_text() for g in loaded}
    found = holders(files)
    if len(found) > 1:
        raise CommandError(
            f"vllm_image_* keys are set in more than one group data file ({', '.join(found)}); "
            "keep them in one, or edit them by hand and run `rocmfleet rollout` without --image"
        )
    if not found:
        groups = {g.group: str(g.path) for g in loaded}
        found = [v for g, v in groups.items() if g != "all"] or list(groups.values())
        if len(found) != 1:
            raise CommandError("no group data file holds vllm_image_*; add vllm_image_tag and vllm_image_digest to one")
    path = found[0]
    try:
        return Path(path), files[path], set_keys(files[path], image.data(), path)
    except EditError as exc:
        raise CommandError(str(exc)) from None


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
