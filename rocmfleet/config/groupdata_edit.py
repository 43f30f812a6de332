"""Write the wanted image (``vllm_image_*`` keys) into a group data file, keeping the rest as it is.

``rocmfleet rollout --image`` pins the resolved tag and digest in the repository, the source of
truth. PyYAML (the loader of :mod:`rocmfleet.config.groupvars`) cannot write a file back with its
comments, so the edit is made on the text: a top-level ``key: value`` line keeps its place, its
indentation and its trailing comment and gets the new value; a missing key is appended at the
end. The result is then parsed again and must equal the old data with exactly the new values
(:func:`set_keys` refuses anything else, e.g. a key written as a block scalar or a flow mapping),
so a text edit can never change another key.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any, cast

import yaml

#: The keys a rollout writes, in this order.
IMAGE_KEYS = ("vllm_image_repository", "vllm_image_tag", "vllm_image_digest")


class EditError(ValueError):
    """The file cannot be edited safely; the message names the file and the key."""


def _opaque_loader() -> type[yaml.SafeLoader]:
    """A SafeLoader that reads ``!vault`` values as their text: comparing, never decrypting."""

    class Loader(yaml.SafeLoader):
        pass

    def vault_text(loader: yaml.SafeLoader, node: yaml.Node) -> tuple[str, str]:
        # construct_scalar refuses a node that is not a scalar (ConstructorError) itself.
        return ("!vault", loader.construct_scalar(cast(yaml.ScalarNode, node)))

    Loader.add_constructor("!vault", vault_text)
    return Loader


def parse(text: str, source: str = "<text>") -> dict[str, Any]:
    """The top-level mapping of a group data file, vault values as ``("!vault", text)``.

    Raises:
        EditError: not YAML, or the top level is not a mapping.
    """
    try:
        data = yaml.load(text, Loader=_opaque_loader()) or {}  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        raise EditError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise EditError(f"{source}: top level must be a mapping")
    return data


def _line_re(key: str) -> re.Pattern[str]:
    # key: value   # comment      (value: plain, single- or double-quoted scalar)
    return re.compile(
        rf"^(?P<head>{re.escape(key)}[ \t]*:[ \t]*)(?P<value>\"(?:[^\"\\]|\\.)*\"|'(?:[^']|'')*'|[^#\s][^#]*?|)"
        r"(?P<tail>[ \t]+#.*|[ \t]*)$",
        re.MULTILINE,
    )


def set_keys(text: str, values: Mapping[str, str], source: str = "<text>") -> str:
    """``text`` with each top-level ``key: value`` of ``values`` set (strings, written double-quoted).

    Args:
        text: the file's text.
        values: ``{"vllm_image_tag": "0.32.0", "vllm_image_digest": "sha256:..."}``.
        source: file name for messages.

    Returns:
        The new text: changed lines in place (indentation and trailing comments kept), new keys
        appended at the end.

    Raises:
        EditError: the key appears more than once, or the edited text does not parse to the
            old data with exactly the new values (a value this edit cannot rewrite safely).
    """
    before = parse(text, source)
    out = text
    appended = []
    for key, value in values.items():
        pattern = _line_re(key)
        found = pattern.findall(out)
        if len(found) > 1:
            raise EditError(f"{source}: {key} appears {len(found)} times")
        if found:
            text = json.dumps(value)
            out = pattern.sub(lambda m: f"{m['head']}{text}{m['tail']}", out, count=1)  # noqa: B023 - used at once
        else:
            appended.append(f"{key}: {json.dumps(value)}")
    if appended:
        out = (out if out.endswith("\n") or not out else out + "\n") + "\n".join(appended) + "\n"
    after = parse(out, source)
    if after != {**before, **values}:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and k not in values)
        wrong = sorted(k for k in values if after.get(k) != values[k])
        raise EditError(
            f"{source}: cannot rewrite {', '.join(wrong or changed)} in place (write it as one `key: value` line)"
        )
    return out


def unset_keys(text: str, keys: list[str], source: str = "<text>") -> str:
    """``text`` without the top-level ``key: value`` lines of ``keys`` (a key not there is left alone).

    Raises:
        EditError: the result does not parse to the old data less exactly those keys.
    """
    before = parse(text, source)
    out = text
    for key in keys:
        out = re.sub(_line_re(key).pattern + r"\n?", "", out, count=1, flags=re.MULTILINE)
    after = parse(out, source)
    if after != {k: v for k, v in before.items() if k not in keys}:
        raise EditError(f"{source}: cannot remove {', '.join(keys)} in place")
    return out


def unified_diff(old: str, new: str, path: str) -> str:
    """The change as a unified diff (``--- path`` / ``+++ path``), empty when nothing changed."""
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), path, path))


def holders(files: Mapping[str, str], keys: tuple[str, ...] = IMAGE_KEYS) -> list[str]:
    """The files (``{path: text}``) whose top level sets any of ``keys``, in the given order."""
    return [path for path, text in files.items() if set(parse(text, path)) & set(keys)]
