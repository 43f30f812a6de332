"""What the ``docker`` role writes: ``daemon.json`` (typed) and the apt source for Docker's packages.

``/etc/docker/daemon.json`` is built from :class:`DockerDaemon`, whose fields are the keys of
Docker's daemon configuration file with Docker's own types (reference: "Daemon configuration
file" in docs.docker.com/reference/cli/dockerd/, and moby ``daemon/config/config.go``,
``config_linux.go``: the Go struct fields each key unmarshals into). A wrongly typed value
(``"live-restore": "true"``) would make ``dockerd`` refuse to start after the restart; here
``rocmfleet validate`` refuses it first, naming the key and the type. Keys Docker has that
this model does not type go in ``docker_daemon_extra``, the explicit escape hatch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from rocmfleet.domain.tooloutput import ToolOutputError, quoted

#: rocmfleet's defaults for a GPU inference host. ``live-restore`` keeps containers serving while
#: dockerd restarts (docs.docker.com/engine/daemon/live-restore/): the vLLM units rely on it
#: (``templates/vllm/vllm.service.j2``), so it cannot be turned off.
DAEMON_DEFAULTS: dict[str, Any] = {"live-restore": True, "log-driver": "json-file"}

#: Bounded logs keep a chatty vLLM from filling the disk. Both options exist for the ``json-file``
#: and ``local`` drivers only (docs.docker.com/engine/logging/drivers/json-file/, .../local/);
#: another driver (journald, syslog...) refuses them, so they are merged in only for those two.
DEFAULT_LOG_OPTS: dict[str, str] = {"max-size": "100m", "max-file": "3"}
LOG_OPTS_DRIVERS = ("json-file", "local")

#: daemon.json keys that a rocmfleet setting writes: set in one place only.
SETTING_KEYS: dict[str, str] = {"insecure-registries": "docker_insecure_registries"}

#: daemon.json keys a running dockerd applies on SIGHUP (``systemctl reload docker``, the
#: ``ExecReload`` of Docker's unit) without a restart: moby ``daemon/reload.go`` ``Reload`` ("These are
#: the settings that Reload changes": platform runtimes, debug, max concurrent downloads/uploads, max
#: download attempts, shutdown timeout, labels, insecure registries, registry mirrors, live restore),
#: as docs.docker.com/reference/cli/dockerd/ "Configuration reload behavior" lists them. A change of
#: any other key needs a restart.
RELOADABLE = frozenset(
    {
        "debug",
        "labels",
        "live-restore",
        "max-concurrent-downloads",
        "max-concurrent-uploads",
        "max-download-attempts",
        "shutdown-timeout",
        "insecure-registries",
        "registry-mirrors",
        "runtimes",
        "default-runtime",
    }
)

#: Packages per ``docker_source``; docker-ce's list is Docker's install guide for Debian. Both get
#: ``pigz``: dockerd decompresses pulled layers with ``unpigz`` when it is on the PATH and with Go's
#: slower ``compress/gzip`` otherwise (dockerd reference, "Environment variables":
#: ``MOBY_DISABLE_PIGZ``; moby/go-archive ``compression/compression.go``). docker-ce lists it in its
#: ``Recommends``, which the role's ``--no-install-recommends`` would otherwise drop, and a vLLM ROCm
#: image is 20-30 GB of gzip layers. (On the lab's 968 MB layer: 14 CPU-seconds for ``unpigz``,
#: 24 for ``gzip -d``, measured on the 2-core machine.)
PACKAGES = {
    "docker": ["docker-ce", "docker-ce-cli", "containerd.io", "docker-buildx-plugin", "pigz"],
    "debian": ["docker.io", "pigz"],
}
#: The engine packages ``docker_version`` pins (Docker releases docker-ce and its CLI with one version;
#: containerd.io and the buildx plugin have their own).
ENGINE_PACKAGES = {"docker": ["docker-ce", "docker-ce-cli"], "debian": ["docker.io"]}


def server_version_pattern(apt_version: str) -> str:
    """The ``docker version --format {{.Server.Version}}`` a package version (or glob) gives.

    The upstream part of a Debian version: no epoch, no Debian revision
    (``5:27.5.1-1~debian.12~bookworm`` -> ``27.5.1``; ``20.10.24+dfsg1-*`` -> ``20.10.24+dfsg1``).
    """
    upstream = apt_version.split(":", 1)[-1]
    return upstream.rsplit("-", 1)[0] if "-" in upstream else upstream


class Ulimit(BaseModel):
    """One ``default-ulimits`` entry (moby ``go-units`` ``Ulimit``: ``Name``, ``Hard``, ``Soft``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    Name: str
    Hard: int
    Soft: int


class AddressPool(BaseModel):
    """One ``default-address-pools`` entry: ``{"base": "10.10.0.0/16", "size": 24}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    base: str
    size: int = Field(ge=1, le=128)


class Runtime(BaseModel):
    """One ``runtimes`` entry: an OCI runtime's binary and arguments."""

    model_config = ConfigDict(extra="forbid", strict=True)

    path: str
    runtimeArgs: list[str] = Field(default_factory=list)  # noqa: N815 - Docker's key


def _key(alias: str, annotation_doc: str) -> Any:  # pydantic types Field() as Any: the default it stands for
    return Field(default=None, alias=alias, description=annotation_doc)


class DockerDaemon(BaseModel):
    """The daemon.json keys rocmfleet types, with Docker's types (strict: no string for a boolean)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=False)

    live_restore: bool | None = _key("live-restore", "Keep containers running while dockerd is down (must be true).")
    log_driver: str | None = _key("log-driver", "Default logging driver (`json-file`, `local`, `journald`...).")
    log_opts: dict[str, str] | None = _key(
        "log-opts", 'Logging driver options, all strings (`"max-file": "3"`); merged key by key over rocmfleet\'s.'
    )
    log_level: Literal["debug", "info", "warn", "error", "fatal"] | None = _key("log-level", "dockerd's log level.")
    log_format: Literal["text", "json"] | None = _key("log-format", "dockerd's log format.")
    insecure_registries: list[str] | None = _key("insecure-registries", "Plain-HTTP registries.")
    registry_mirrors: list[str] | None = _key("registry-mirrors", "Docker Hub mirrors (URLs).")
    data_root: str | None = _key("data-root", "Where Docker keeps images and containers (absolute path).")
    exec_root: str | None = _key("exec-root", "Root of the daemon's execution state.")
    default_ulimits: dict[str, Ulimit] | None = _key(
        "default-ulimits", 'Per-container ulimits: `{"nofile": {"Name": "nofile", "Hard": 64000, "Soft": 64000}}`.'
    )
    default_shm_size: str | None = _key("default-shm-size", "Default `/dev/shm` size, e.g. `64M`.")
    default_runtime: str | None = _key("default-runtime", "Default OCI runtime.")
    runtimes: dict[str, Runtime] | None = _key("runtimes", "Extra OCI runtimes.")
    ipv6: bool | None = _key("ipv6", "IPv6 on the default bridge.")
    fixed_cidr: str | None = _key("fixed-cidr", "IPv4 subnet for the default bridge.")
    fixed_cidr_v6: str | None = _key("fixed-cidr-v6", "IPv6 subnet for the default bridge.")
    bip: str | None = _key("bip", "Default bridge IP and netmask.")
    mtu: int | None = _key("mtu", "Default bridge MTU.")
    default_address_pools: list[AddressPool] | None = _key("default-address-pools", "Address pools for networks.")
    dns: list[str] | None = _key("dns", "DNS servers for containers.")
    dns_opts: list[str] | None = _key("dns-opts", "DNS options for containers.")
    dns_search: list[str] | None = _key("dns-search", "DNS search domains for containers.")
    iptables: bool | None = _key("iptables", "Let Docker manage iptables rules.")
    ip6tables: bool | None = _key("ip6tables", "Let Docker manage ip6tables rules.")
    ip_forward: bool | None = _key("ip-forward", "Enable IP forwarding.")
    ip_masq: bool | None = _key("ip-masq", "Masquerade the bridge's traffic.")
    icc: bool | None = _key("icc", "Inter-container communication on the default bridge.")
    userland_proxy: bool | None = _key("userland-proxy", "Use the userland proxy for loopback traffic.")
    debug: bool | None = _key("debug", "Debug mode.")
    experimental: bool | None = _key("experimental", "Experimental features.")
    features: dict[str, bool] | None = _key("features", 'Feature switches, e.g. `{"containerd-snapshotter": true}`.')
    storage_driver: str | None = _key("storage-driver", "Storage driver (`overlay2`...).")
    storage_opts: list[str] | None = _key("storage-opts", "Storage driver options.")
    exec_opts: list[str] | None = _key("exec-opts", "Runtime options, e.g. `native.cgroupdriver=systemd`.")
    max_concurrent_downloads: int | None = _key("max-concurrent-downloads", "Parallel layer downloads per pull.")
    max_concurrent_uploads: int | None = _key("max-concurrent-uploads", "Parallel layer uploads per push.")
    max_download_attempts: int | None = _key("max-download-attempts", "Download attempts per layer.")
    shutdown_timeout: int | None = _key("shutdown-timeout", "Seconds dockerd waits for containers when it stops.")
    metrics_addr: str | None = _key("metrics-addr", "Prometheus metrics address, e.g. `127.0.0.1:9323`.")
    no_new_privileges: bool | None = _key("no-new-privileges", "no-new-privileges for new containers.")
    selinux_enabled: bool | None = _key("selinux-enabled", "SELinux support.")
    userns_remap: str | None = _key("userns-remap", "User namespace remapping.")
    cgroup_parent: str | None = _key("cgroup-parent", "Parent cgroup of all containers.")
    group: str | None = _key("group", "Group owning the API socket.")
    hosts: list[str] | None = _key("hosts", "API sockets (conflicts with the systemd unit's `-H` when set there).")
    labels: list[str] | None = _key("labels", "Daemon labels.")
    containerd: str | None = _key("containerd", "containerd socket.")
    proxies: dict[str, str] | None = _key("proxies", "`http-proxy`, `https-proxy`, `no-proxy` for pulls.")


def _json_type(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """A JSON Schema node in words: ``boolean``, ``array of string``, ``object of integer``..."""
    if "anyOf" in schema:
        return " or ".join(_json_type(s, defs) for s in schema["anyOf"] if s.get("type") != "null")
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        props = defs[name].get("properties", {})
        return "object {" + ", ".join(f"{k}: {_json_type(v, defs)}" for k, v in props.items()) + "}"
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    kind: str = schema.get("type", "any")
    if kind == "array":
        return "array of " + _json_type(schema.get("items", {}), defs)
    if kind == "object" and "additionalProperties" in schema:
        return "object of " + _json_type(schema["additionalProperties"], defs)
    return kind


def key_type(key: str) -> str | None:
    """Docker's type of daemon.json key ``key`` in words (``"live-restore"`` -> ``"boolean"``), or
    ``None`` when :class:`DockerDaemon` does not type it."""
    schema = DockerDaemon.model_json_schema()
    node = schema["properties"].get(key)
    return None if node is None else _json_type(node, schema.get("$defs", {}))


class DaemonSettings(Protocol):
    """The host settings daemon.json is rendered from (:class:`rocmfleet.config.hostsettings.HostSettings` has them)."""

    @property
    def docker_daemon(self) -> DockerDaemon: ...
    @property
    def docker_daemon_extra(self) -> Mapping[str, Any]: ...
    @property
    def docker_insecure_registries(self) -> Sequence[str]: ...
    @property
    def docker_source(self) -> str: ...


def known_keys() -> list[str]:
    """The daemon.json keys :class:`DockerDaemon` types, as Docker spells them."""
    return sorted(f.alias or name for name, f in DockerDaemon.model_fields.items())


def daemon_problems(settings: DaemonSettings) -> list[tuple[str, str, str]]:
    """Rules across keys, as ``(key, message, value)``: ``live-restore`` stays on; a key that a
    rocmfleet setting writes is set in one place; the escape hatch holds only keys not typed here."""
    problems = []
    user = settings.docker_daemon.model_dump(by_alias=True, exclude_none=True)
    if user.get("live-restore") is False:
        problems.append(
            (
                "docker_daemon.live-restore",
                "must stay true: the vLLM units rely on it so that a Docker restart or upgrade leaves the containers "
                "serving (docs/host.md: the unit and the container)",
                "False",
            )
        )
    for key, setting in SETTING_KEYS.items():
        for where, present in (
            (f"docker_daemon.{key}", key in user),
            (f"docker_daemon_extra.{key}", key in settings.docker_daemon_extra),
        ):
            if present and getattr(settings, setting):
                problems.append(
                    (where, f"also set by {setting}; set the registries in one place (rocmfleet writes {setting})", "")
                )
    problems += value_problems(user, settings.docker_source)
    for key in sorted(settings.docker_daemon_extra):
        if key_type(key) is not None:
            problems.append(
                (
                    f"docker_daemon_extra.{key}",
                    f"is a typed daemon.json key ({key_type(key)}): set it in docker_daemon, where its type is checked",
                    "",
                )
            )
    return problems


#: Keys that the packaged ``docker.service`` already passes as flags (docker-ce and Debian's
#: docker.io both run ``dockerd -H fd://``; docker-ce adds ``--containerd=/run/containerd/containerd.sock``).
#: dockerd refuses to start when a key is given both ways: "the following directives are specified
#: both as a flag and in the configuration file" (moby ``daemon/config/config.go``,
#: ``findConfigurationConflicts``).
UNIT_FLAG_KEYS = {
    "docker": {"hosts": "-H fd://", "containerd": "--containerd=/run/containerd/containerd.sock"},
    "debian": {"hosts": "-H fd://"},
}


def _mirror_problem(url: str) -> str | None:
    """moby ``registry/config.go`` ``ValidateMirror``: an http(s) URL, no query, fragment or user."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return f"{url!r} is not an http:// or https:// URL (dockerd: invalid mirror: unsupported scheme)"
    if not parts.hostname:
        return f"{url!r} names no host"
    if parts.query or parts.fragment or parts.username or parts.password:
        return f"{url!r} has a query, fragment or user: dockerd refuses it (invalid mirror)"
    return None


def value_problems(user: Mapping[str, Any], source: str = "docker") -> list[tuple[str, str, str]]:
    """The values dockerd refuses at start although their JSON type is right, as ``(key, message,
    value)``; checked here so that a host never gets a daemon.json its dockerd will not start with.

    Rules (moby ``daemon/config/config.go`` ``Validate`` and ``findConfigurationConflicts``,
    ``registry/config.go`` ``ValidateMirror``, ``opts/opts.go`` ``ValidateIPAddress`` and
    ``ValidateLabel``): counts (``mtu``, ``max-concurrent-downloads``/``-uploads``,
    ``max-download-attempts``) not negative; ``registry-mirrors`` http(s) URLs; ``dns`` IP
    addresses; ``labels`` ``key=value``; the ``runc`` runtime name reserved; no key that the
    packaged unit passes as a flag (:data:`UNIT_FLAG_KEYS`).

    Args:
        user: ``docker_daemon`` as daemon.json keys (``model_dump(by_alias=True, exclude_none=True)``).
        source: ``docker_source`` (``docker`` or ``debian``): whose ``docker.service`` runs dockerd.
    """
    import ipaddress

    problems: list[tuple[str, str, str]] = []
    for key in ("mtu", "max-concurrent-downloads", "max-concurrent-uploads", "max-download-attempts"):
        if isinstance(user.get(key), int) and user[key] < 0:
            problems.append(
                (f"docker_daemon.{key}", "must be 0 or more: dockerd refuses a negative count", str(user[key]))
            )
    for i, url in enumerate(user.get("registry-mirrors") or []):
        if why := _mirror_problem(url):
            problems.append((f"docker_daemon.registry-mirrors.{i}", why, ""))
    for i, server in enumerate(user.get("dns") or []):
        try:
            ipaddress.ip_address(server)
            if "%" in server:  # Python takes a scoped IPv6 address; dockerd's net.ParseIP does not
                raise ValueError(server)
        except ValueError:
            problems.append(
                (f"docker_daemon.dns.{i}", "must be an IP address (dockerd: not an ip address)", repr(server))
            )
    for i, label in enumerate(user.get("labels") or []):
        if "=" not in label or label.startswith("="):
            problems.append(
                (f"docker_daemon.labels.{i}", "must be key=value (dockerd: bad attribute format)", repr(label))
            )
    if "runc" in (user.get("runtimes") or {}):
        problems.append(
            ("docker_daemon.runtimes.runc", "is reserved: dockerd's own runtime name (give yours another)", "")
        )
    for key, flag in UNIT_FLAG_KEYS.get(source, {}).items():
        if key in user:
            problems.append(
                (
                    f"docker_daemon.{key}",
                    f"is passed by the packaged docker.service as {flag}: dockerd refuses to start when a setting "
                    "is both a flag and in daemon.json; leave it out",
                    "",
                )
            )
    return problems


def daemon_dict(settings: DaemonSettings) -> dict[str, Any]:
    """The daemon.json content: rocmfleet's defaults, then ``docker_daemon`` (``log-opts`` merged key
    by key over :data:`DEFAULT_LOG_OPTS` when the log driver takes them), then ``docker_daemon_extra``,
    then the registries of ``docker_insecure_registries`` (sorted, without duplicates)."""
    user = settings.docker_daemon.model_dump(by_alias=True, exclude_none=True)
    daemon: dict[str, Any] = {**DAEMON_DEFAULTS, **user}
    if daemon["log-driver"] in LOG_OPTS_DRIVERS:
        daemon["log-opts"] = {**DEFAULT_LOG_OPTS, **user.get("log-opts", {})}
    daemon.update(settings.docker_daemon_extra)
    if settings.docker_insecure_registries:
        daemon["insecure-registries"] = sorted(set(settings.docker_insecure_registries))
    return daemon


def daemon_json(settings: DaemonSettings) -> str:
    """Render ``/etc/docker/daemon.json`` (:func:`daemon_dict`).

    Returns:
        Pretty JSON with sorted keys and a final newline, so equal data gives equal bytes
        (and a second converge changes nothing).
    """
    return json.dumps(daemon_dict(settings), indent=2, sort_keys=True) + "\n"


def restart_needed(old_text: str | None, new_text: str) -> bool:
    """Whether dockerd must restart to apply ``new_text`` over ``old_text`` (both daemon.json texts).

    ``False`` when every key that differs is in :data:`RELOADABLE` (a reload applies them: adding a
    registry restarts nothing); ``True`` for any other change, or when the old file is missing or is
    not a JSON object (what the running dockerd uses is then unknown).
    """
    try:
        old = json.loads(old_text) if old_text is not None else None
        new = json.loads(new_text)
    except ValueError:
        return True
    if not isinstance(old, dict) or not isinstance(new, dict):
        return True
    changed = {key for key in old.keys() | new.keys() if old.get(key) != new.get(key)}
    return bool(changed - RELOADABLE)


def parse_daemon_json(text: str) -> dict[str, Any]:
    """``/etc/docker/daemon.json`` (``text``) as a dict.

    Raises:
        ToolOutputError: empty (or unreadable), not JSON (e.g. truncated), or not a JSON object.
    """
    if not text.strip():
        raise ToolOutputError("/etc/docker/daemon.json is empty or could not be read")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ToolOutputError(f"/etc/docker/daemon.json is not JSON ({exc}): {quoted(text, 400)}") from None
    if not isinstance(value, dict):
        raise ToolOutputError(f"/etc/docker/daemon.json is not a JSON object: {quoted(text, 400)}")
    return value


def parse_inspect(text: str, name: str) -> dict[str, Any]:
    """The one object ``docker inspect NAME`` prints (a JSON list of one object with ``Id``).

    Raises:
        ToolOutputError: empty output, not JSON (truncated), or not a list of exactly one object
            with an ``Id`` (another format).
    """
    try:
        value = json.loads(text)
    except ValueError:
        raise ToolOutputError(f"docker inspect {name}: not JSON: {quoted(text, 400)}") from None
    if not (isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict) and "Id" in value[0]):
        raise ToolOutputError(f"docker inspect {name}: not a list of one object with an Id: {quoted(text, 400)}")
    return value[0]
