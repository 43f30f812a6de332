"""The last good version of a vLLM instance: where its copies are, what records it, how to read and save it (pure).

The last good version of an instance is a copy of its unit, environment and secrets files in
``/etc/rocmfleet/vllm/<instance>.last-good/`` plus ``serve.json`` (image, ``vllm serve``
arguments and environment: :func:`serve_record`), written only after the instance was ready with
exactly those files (:func:`save_last_good_script`). The deploy plans these files
(:mod:`rocmfleet.plan.instance`), reads them (:class:`rocmfleet.facts.rollout.LastGood`) and a
swap rolls back to them (:mod:`rocmfleet.plan.swap`). Everything here returns data or
shell text; nothing runs.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Saved copies, by the name used in ``<instance>.last-good/``: the mode each live file has
#: (``roles/vllm``: unit 0644, environment and secrets 0600, all root's).
SAVED_FILES = {"unit": "644", "env": "600", "secrets": "600"}


@dataclass(frozen=True)
class LastGoodFiles:
    """Where one instance's live files and their last good copies are.

    Attributes:
        directory: ``/etc/rocmfleet/vllm/<instance>.last-good`` (mode 0700, root).
        live: ``{"unit": "/etc/systemd/system/vllm-<instance>.service", "env": ..., "secrets": ...}``,
            keyed like :data:`SAVED_FILES`.
    """

    directory: str
    live: Mapping[str, str]

    def saved(self, name: str) -> str:
        """The copy of live file ``name`` (``"unit"``, ``"env"`` or ``"secrets"``)."""
        return f"{self.directory}/{name}"

    @property
    def serve_json(self) -> str:
        """``<directory>/serve.json``: the :func:`serve_record` of the last good version."""
        return f"{self.directory}/serve.json"


def last_good_files(config_dir: str, instance: str, unit_path: str, env_file: str, secrets_file: str) -> LastGoodFiles:
    """The :class:`LastGoodFiles` of ``instance``, its copies in ``<config_dir>/<instance>.last-good``.

    Args:
        config_dir: the deploy's per-instance directory (``rocmfleet.domain.vllmfiles.CONFIG_DIR``).
        instance: instance name.
        unit_path, env_file, secrets_file: absolute paths of the live files.
    """
    return LastGoodFiles(
        directory=f"{config_dir}/{instance}.last-good",
        live={"unit": unit_path, "env": env_file, "secrets": secrets_file},
    )


def serve_record(image: str, serve_args: Sequence[str], env: Mapping[str, str]) -> str:
    """What a version of an instance runs, as one line of JSON (keys sorted) and a newline.

    Args:
        image: the image reference, ``repository:tag@sha256:...``.
        serve_args: the ``vllm serve`` arguments (``rocmfleet.domain.vllm.serve_args``).
        env: the container environment without secrets (``rocmfleet.domain.vllm.container_env``).

    Example: ``{"env": {"A": "1"}, "image": "r:t@sha256:...", "serve_args": ["/m", "--port", "8000"]}``
    """
    return json.dumps({"image": image, "serve_args": list(serve_args), "env": dict(env)}, sort_keys=True) + "\n"


def last_good_state_command(files: LastGoodFiles) -> str:
    """Shell printing, per saved file, ``<name> same|differs|missing`` (the copy against the live
    file; ``missing``: no copy), then ``serve <json>`` when ``serve.json`` exists. Read by
    :func:`parse_last_good_state`."""
    lines = [
        f"if [ ! -e {shlex.quote(files.saved(n))} ]; then echo '{n} missing'; "
        f"elif cmp -s {shlex.quote(files.saved(n))} {shlex.quote(files.live[n])}; then echo '{n} same'; "
        f"else echo '{n} differs'; fi"
        for n in SAVED_FILES
    ]
    serve = shlex.quote(files.serve_json)
    lines.append(f"if [ -r {serve} ]; then printf 'serve '; tr -d '\\n' < {serve}; echo; fi")
    return "; ".join(lines)


@dataclass(frozen=True)
class LastGoodState:
    """What :func:`last_good_state_command` found.

    Attributes:
        files: ``{"unit": "same" | "differs" | "missing", "env": ..., "secrets": ...}``.
        serve: the parsed ``serve.json`` (``{"image", "serve_args", "env"}``), ``None`` if absent
            or not JSON.
    """

    files: Mapping[str, str]
    serve: Mapping[str, object] | None

    @property
    def complete(self) -> bool:
        """Every file has a copy and ``serve.json`` exists: a version to roll back to."""
        return self.serve is not None and all(self.files.get(n) in ("same", "differs") for n in SAVED_FILES)

    @property
    def same(self) -> bool:
        """Every live file equals its copy."""
        return all(self.files.get(n) == "same" for n in SAVED_FILES)

    @property
    def image(self) -> str | None:
        """The last good version's image, from ``serve.json``."""
        image = (self.serve or {}).get("image")
        return image if isinstance(image, str) else None

    @property
    def served(self) -> tuple[int | None, str | None]:
        """The last good version's API port and served model name, read from its ``serve_args``
        (:func:`served_by`); ``(None, None)`` without ``serve.json``."""
        args = (self.serve or {}).get("serve_args")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            return None, None
        return served_by(args)


def served_by(serve_args: Sequence[str]) -> tuple[int | None, str | None]:
    """The port and the (first) served model name a ``vllm serve`` argument list makes the server use.

    ``--port N`` / ``--port=N`` (the last one wins, as argparse reads it; vLLM's default 8000,
    ``vllm/entrypoints/openai/cli_args.py``), ``--served-model-name NAME...`` (``nargs="+"``:
    ``/v1/models`` lists every name; the first is enough to probe), else the model, the first
    positional argument (vLLM serves it under its path or id when no name is given).

    Example: ``served_by(["/m", "--served-model-name", "tiny", "--port", "8001"]) == (8001, "tiny")``.
    """
    port: int | None = 8000
    name = None
    model = serve_args[0] if serve_args and not serve_args[0].startswith("-") else None
    for i, arg in enumerate(serve_args):
        flag, eq, inline = arg.partition("=")
        value = inline if eq else (serve_args[i + 1] if i + 1 < len(serve_args) else None)
        if flag == "--port" and value is not None:
            port = int(value) if value.isdigit() else None
        elif flag == "--served-model-name" and value is not None and not value.startswith("-"):
            name = value
    return port, name or model


def parse_last_good_state(lines: Sequence[str]) -> LastGoodState:
    """Parse :func:`last_good_state_command`'s output; unknown lines are ignored."""
    files: dict[str, str] = {}
    serve = None
    for line in lines:
        key, _, value = line.strip().partition(" ")
        if key in SAVED_FILES and value in ("same", "differs", "missing"):
            files[key] = value
        elif key == "serve":
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = None
            serve = parsed if isinstance(parsed, dict) else None
    return LastGoodState(files=files, serve=serve)


def save_last_good_script(files: LastGoodFiles, record: str) -> str:
    """Shell that copies the live files into the last good directory and writes ``serve.json``.

    Copies are root's, mode 0600 in a 0700 directory (the secrets file holds secret values; it
    is copied on the host and never printed). ``serve.json`` is written to a temporary file and
    renamed, so a partial write never looks like a complete last good version.

    Args:
        files: the instance's files.
        record: :func:`serve_record` of the version now running and ready.
    """
    d = shlex.quote(files.directory)
    copies = [
        f"install -m 600 -o root -g root {shlex.quote(files.live[n])} {shlex.quote(files.saved(n))}"
        for n in SAVED_FILES
    ]
    serve = shlex.quote(files.serve_json)
    return " && ".join(
        [
            f"install -d -m 700 -o root -g root {d}",
            *copies,
            f"printf '%s' {shlex.quote(record)} > {serve}.tmp",
            f"chmod 600 {serve}.tmp",
            f"mv {serve}.tmp {serve}",
        ]
    )
