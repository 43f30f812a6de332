"""Resolve an image tag to its manifest digest with the registry's HTTP API (Distribution v2).

``rocmfleet rollout --image REPO:TAG`` asks the registry once, at the start, which manifest the
tag names, and pins that digest in group data: a tag re-pushed mid-rollout cannot give two
hosts two images (the failure of dynamo issue 14573).

The request is the one ``docker pull`` makes first (docker/distribution
``registry/client/repository.go``, ``manifests.Get``/``Exists``; the OCI distribution spec,
"Checking if content exists in the registry")::

    HEAD /v2/<name>/manifests/<tag>
    Accept: application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json,
            application/vnd.docker.distribution.manifest.list.v2+json,
            application/vnd.docker.distribution.manifest.v2+json

and the digest is the ``Docker-Content-Digest`` header. A multi-platform image answers with its
index (manifest list): its digest is what ``docker pull repo@sha256:...`` takes and what
``docker inspect`` shows as ``RepoDigests``. A registry that sends no digest on ``HEAD`` is
asked with ``GET`` and the digest is the SHA-256 of the exact bytes it sent (the spec's
definition of a manifest's digest).

Authentication follows the registry's ``401`` challenge (docker/distribution
``registry/client/auth/session.go``): ``Bearer realm=...,service=...,scope=...`` gets a token from
the realm (anonymously, or with the host's ``docker_registry_auth`` user and password as HTTP
Basic), ``Basic`` is answered with the credentials. Registries listed in
``docker_insecure_registries`` are spoken to over plain HTTP, as Docker does; every other over
HTTPS with certificate checks.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from rocmfleet.domain.imageref import digest_problem, name_problem

#: Manifest media types accepted, most specific last as Docker sends them (OCI image-spec
#: ``media-types.md``; Docker's ``manifest/manifestlist`` and ``manifest/schema2``).
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
#: Docker Hub's API host for ``docker.io`` names (docker/distribution ``reference/normalize.go``).
DOCKER_HUB = "registry-1.docker.io"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
TIMEOUT_S = 30.0


class RegistryError(RuntimeError):
    """The digest could not be resolved; the message names the URL and the registry's answer."""


@dataclass(frozen=True)
class ImageName:
    """An image reference split the way Docker splits it.

    Attributes:
        registry: ``host[:port]`` (``docker.io`` when the name has no registry part).
        path: repository path in that registry (``library/ubuntu`` for a bare Docker Hub name).
        tag: the tag.
        repository: the repository as written (without tag), for group data.
        digest: the pinned digest of ``REPO:TAG@sha256:...``, or None (the tag's is asked for).
    """

    registry: str
    path: str
    tag: str
    repository: str
    digest: str | None = None


def parse_image(reference: str) -> ImageName:
    """Split ``REPO:TAG`` or ``REPO:TAG@sha256:...`` (``registry:5000/org/name:tag``, ``rocm/vllm:tag``).

    The first path component is a registry when it has a ``.`` or ``:`` or is ``localhost``
    (docker/distribution ``reference/normalize.go``, ``splitDockerDomain``). A pinned digest is
    kept as given (the registry is then asked for that manifest, not for the tag's).

    Raises:
        ValueError: no tag (a digest alone says nothing a person can read), a malformed digest,
            or a repository that Docker's reference grammar refuses
            (:func:`rocmfleet.domain.imageref.name_problem`: white space, control or non-ASCII
            characters, upper case, ``a:b:c``).
    """
    named, at, digest = reference.partition("@")
    if at and (problem := digest_problem(digest)):
        raise ValueError(f"--image {reference!r}: {problem}")
    repository, sep, tag = named.rpartition(":")
    if not sep or "/" in tag or not repository or not re.fullmatch(r"\w[\w.-]{0,127}", tag):
        raise ValueError(f"--image {reference!r}: expected REPO:TAG, e.g. docker.io/rocm/vllm:rocm7.0_vllm_0.10.2")
    problem = name_problem(repository)
    if problem:
        raise ValueError(f"--image {reference!r}: repository {repository!r}: {problem}")
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = "docker.io", repository
    if registry == "docker.io" and "/" not in path:
        path = f"library/{path}"
    return ImageName(registry, path, tag, repository, digest or None)


#: How Docker names Docker Hub in ``config.json`` (docker/cli ``registry.IndexServer``).
DOCKER_HUB_CONFIG_KEY = "https://index.docker.io/v1/"


def docker_config_credentials(registry: str, config_dir: str | None = None) -> tuple[str, str] | None:
    """``(user, password)`` for ``registry`` from the control machine's Docker client config, as
    ``docker login`` left them, or None.

    Reads ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``; docker/cli
    ``cli/config/config.go``): a credential helper (``credHelpers[registry]``, else
    ``credsStore``) is run as ``docker-credential-<name> get`` with the server on standard input
    and answers ``{"Username", "Secret"}`` (docker/docker-credential-helpers protocol); else
    ``auths[registry].auth`` is base64 ``user:password``. Docker Hub is keyed
    :data:`DOCKER_HUB_CONFIG_KEY`. Any failure (no file, a helper that is missing or fails) is
    None: host data's ``docker_registry_auth`` and anonymous pulls remain.

    Args:
        registry: ``host[:port]`` as in :class:`ImageName` (``docker.io`` for Docker Hub).
        config_dir: the directory instead of ``$DOCKER_CONFIG`` or ``~/.docker``.
    """
    import os
    import subprocess
    from pathlib import Path

    directory = Path(config_dir or os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return None
    key = DOCKER_HUB_CONFIG_KEY if registry in ("docker.io", "index.docker.io") else registry
    helper = (config.get("credHelpers") or {}).get(key) or config.get("credsStore")
    if helper:
        try:
            answer = subprocess.run(
                [f"docker-credential-{helper}", "get"], input=key, capture_output=True, text=True, timeout=30
            )
            found = json.loads(answer.stdout) if answer.returncode == 0 else {}
        except (OSError, ValueError, subprocess.TimeoutExpired):
            found = {}
        if found.get("Username") and found.get("Secret"):
            return str(found["Username"]), str(found["Secret"])
    entry = (config.get("auths") or {}).get(key) or (config.get("auths") or {}).get(f"https://{key}") or {}
    try:
        user, sep, password = base64.b64decode(entry.get("auth", "")).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return (user, password) if sep and user else None


def _api_host(registry: str) -> str:
    return DOCKER_HUB if registry in ("docker.io", "index.docker.io") else registry


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="..."`` -> ``("bearer", {"realm": ..., "service": ...})``."""
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', params))


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class _NoRedirectToHttp(urllib.request.HTTPRedirectHandler):
    """Follow redirects, dropping the Authorization header to another host (as Docker does)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


def _open(url: str, method: str, headers: Mapping[str, str], timeout_s: float) -> http.client.HTTPResponse:
    opener = urllib.request.build_opener(_NoRedirectToHttp)
    response: http.client.HTTPResponse = opener.open(
        urllib.request.Request(url, method=method, headers=dict(headers)), timeout=timeout_s
    )
    return response


def _token(params: Mapping[str, str], scope: str, credentials: tuple[str, str] | None, timeout_s: float) -> str:
    realm = params.get("realm")
    if not realm:
        raise RegistryError(f"the registry's Bearer challenge has no realm: {dict(params)}")
    query = {"scope": params.get("scope") or scope}
    if params.get("service"):
        query["service"] = params["service"]
    url = f"{realm}?{urllib.parse.urlencode(query)}"
    headers = {"Authorization": _basic(*credentials)} if credentials else {}
    try:
        with _open(url, "GET", headers, timeout_s) as response:
            body = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise RegistryError(f"token request {realm}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RegistryError(f"token request {realm}: {exc}") from None
    token = body.get("token") or body.get("access_token")
    if not token:
        raise RegistryError(f"token request {realm}: no token in the answer")
    return str(token)


def resolve_digest(
    image: ImageName,
    insecure_registries: Sequence[str] = (),
    credentials: tuple[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> str:
    """The manifest digest (``sha256:`` and 64 hex) the registry gives for ``image``'s tag; for a
    pinned ``image.digest``, that digest once the registry has shown it has that manifest.

    Args:
        image: from :func:`parse_image`.
        insecure_registries: ``host:port`` names spoken to over plain HTTP (the hosts'
            ``docker_insecure_registries``).
        credentials: ``(user, password)`` for this registry (``docker_registry_auth``), or ``None``.
        timeout_s: seconds per HTTP request.

    Raises:
        RegistryError: unreachable registry, unknown tag (404), refused credentials, or an
            answer without a usable digest; the message names the URL and status.
    """
    scheme = "http" if image.registry in insecure_registries else "https"
    url = f"{scheme}://{_api_host(image.registry)}/v2/{image.path}/manifests/{image.digest or image.tag}"
    scope = f"repository:{image.path}:pull"
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    for method in ("HEAD", "GET"):
        for _attempt in range(2):
            try:
                with _open(url, method, headers, timeout_s) as response:
                    digest = str(response.headers.get("Docker-Content-Digest", "")).strip()
                    body = response.read() if method == "GET" else b""
                break
            except urllib.error.HTTPError as exc:
                if exc.code == 401 and "Authorization" not in headers:
                    kind, params = _challenge(exc.headers.get("WWW-Authenticate", ""))
                    if kind == "bearer":
                        headers["Authorization"] = f"Bearer {_token(params, scope, credentials, timeout_s)}"
                        continue
                    if kind == "basic" and credentials:
                        headers["Authorization"] = _basic(*credentials)
                        continue
                if exc.code == 404:
                    what = f"manifest {image.digest}" if image.digest else f"tag {image.tag}"
                    raise RegistryError(f"{url}: HTTP 404: no {what} in {image.repository}") from None
                raise RegistryError(f"{url}: HTTP {exc.code} {exc.reason}") from None
            except (urllib.error.URLError, OSError) as exc:
                raise RegistryError(f"{url}: {getattr(exc, 'reason', exc)}") from None
        else:
            raise RegistryError(f"{url}: the registry refused the credentials (HTTP 401)")
        if method == "GET" and body:
            computed = "sha256:" + hashlib.sha256(body).hexdigest()
            if digest and digest != computed:
                raise RegistryError(f"{url}: Docker-Content-Digest {digest} differs from the body's {computed}")
            digest = computed
        if image.digest and digest and digest != image.digest:
            raise RegistryError(f"{url}: the registry's manifest is {digest}, not the pinned {image.digest}")
        if DIGEST_RE.fullmatch(digest):
            return digest
    raise RegistryError(f"{url}: the registry answered without a sha256 digest")
