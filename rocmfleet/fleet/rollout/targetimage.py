"""The fleet's image on its hosts: a reference's digest from the registry, asked with the hosts'
registry settings (:func:`resolve`), and a host with an image pinned (:func:`with_image`).

Apart from :mod:`rocmfleet.fleet.rollout.fleetimage` (the group data file that pins the image, the
hosts pinned elsewhere), which takes no host's configuration: what plans a rollout offline
(``rocmfleet plan --image``) then does not stack on the hosts' validated configuration.
"""

from __future__ import annotations

import urllib.error
from collections.abc import Mapping
from dataclasses import replace

from rocmfleet.config.settings import HostConfig
from rocmfleet.fleet.registry import RegistryError, docker_config_credentials, parse_image, resolve_digest
from rocmfleet.fleet.rollout.fleetimage import CommandError, Unconfirmed
from rocmfleet.fleet.rollout.state import ImageRef
from rocmfleet.fleet.target import Target


def with_image(target: Target[HostConfig], image: ImageRef) -> Target[HostConfig]:
    """``target`` with ``image`` pinned in its configuration."""
    config = target.config
    pinned = config.image.model_copy(update={"repository": image.repository, "tag": image.tag, "digest": image.digest})
    return replace(target, config=replace(config, image=pinned))


def resolve(reference: str, targets: Mapping[str, Target[HostConfig]]) -> ImageRef:
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
        cause = exc.__context__  # what the registry module turned into a RegistryError
        unreachable = isinstance(cause, OSError) and not isinstance(cause, urllib.error.HTTPError)
        why = f"registry unreachable ({exc})" if unreachable else f"the registry did not confirm it ({exc})"
        raise Unconfirmed(f"cannot resolve {reference}: {exc}", why) from None
    return ImageRef(repository=name.repository, tag=name.tag, digest=digest)
