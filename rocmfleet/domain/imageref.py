"""Container image references, checked with the grammar Docker and skopeo use.

A port of the regular expressions of Docker's distribution reference package
(https://github.com/distribution/reference, ``regexp.go`` and ``normalize.go`` at v0.6.0; the
grammar is in ``reference.go``'s comment), since no small maintained Python library implements
it::

    reference        := name [ ":" tag ] [ "@" digest ]
    name             := [domain '/'] remote-name
    domain           := host [':' port-number]
    host             := domain-name | IPv4address | \\[ IPv6address \\]
    domain-name      := domain-component ['.' domain-component]*
    domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
    remote-name      := path-component ['/' path-component]*
    path-component   := alpha-numeric [separator alpha-numeric]*
    alpha-numeric    := /[a-z0-9]+/
    separator        := /[_.]|__|[-]+/
    tag              := /[\\w][\\w.-]{0,127}/
    digest           := algorithm ":" hex   (rocmfleet runs images by sha256 only)

The name is at most 255 characters. As ``ParseNormalizedNamed`` does, a first component
without ``.`` or ``:`` that is not ``localhost`` is part of the path (Docker Hub), so it must
be lower case too.
"""

from __future__ import annotations

import re

_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN = rf"(?:{_DOMAIN_NAME}|{_IPV6})(?::[0-9]+)?"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_REMOTE_NAME = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"

#: ``[domain/]remote-name``, anchored (distribution's ``anchoredNameRegexp``).
NAME = re.compile(rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_REMOTE_NAME})")
#: A tag (distribution's ``anchoredTagRegexp``).
TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
#: The digests rocmfleet runs images by: sha256 and 64 lower-case hex digits (OCI image spec, descriptor.md).
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: distribution's ``NameTotalLengthMax``.
NAME_MAX = 255


def name_problem(name: str) -> str | None:
    """Why ``name`` is not a repository name (no tag, no digest), or None when it is one."""
    if not isinstance(name, str) or not name:
        return "an image repository name is required"
    if "@" in name:
        return "holds a digest: give the repository only (the digest goes in its own key)"
    if any(c.isspace() for c in name):
        return "holds white space: a repository name has none"
    if len(name) > NAME_MAX:
        return f"longer than {NAME_MAX} characters (Docker's limit)"
    match = NAME.fullmatch(name)
    if match is None:
        last = name.rsplit("/", 1)[-1]
        if ":" in last and NAME.fullmatch(name.rsplit(":", 1)[0]):
            return "holds a tag: give the repository only (the tag goes in its own key)"
        if name != name.lower() and NAME.fullmatch(name.lower()):
            return "must be lower case (Docker refuses upper-case repository names)"
        return (
            "not a repository name: [registry[:port]/]path, path components of a-z, 0-9 separated by "
            "'.', '_', '__' or '-' (Docker's reference grammar)"
        )
    first, _, rest = name.partition("/")
    hub_path = not ("." in first or ":" in first or first == "localhost")  # normalize.go's splitDockerDomain
    if rest and match["domain"] and hub_path and first != first.lower():
        return "must be lower case (Docker refuses upper-case repository names)"
    return None


def tag_problem(tag: str) -> str | None:
    """Why ``tag`` is not an image tag, or None."""
    if not isinstance(tag, str) or not TAG.fullmatch(tag):
        return "not an image tag: up to 128 of A-Z, a-z, 0-9, '_', '.', '-', not starting with '.' or '-'"
    return None


def digest_problem(digest: str) -> str | None:
    """Why ``digest`` is not an image digest rocmfleet runs by, or None."""
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        return "not an image digest: sha256: and 64 lower-case hex digits (skopeo inspect docker://IMAGE:TAG)"
    return None
