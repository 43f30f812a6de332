"""Quoting for systemd unit files."""

from __future__ import annotations

import re

_PLAIN = re.compile(r"^[A-Za-z0-9_@%$+=:,./-]+$")


def quote_word(word: str) -> str:
    """Quote one argument for an ``Exec*=`` line (systemd.service(5), "Command lines").

    systemd expands ``%`` specifiers and ``$VAR`` references, splits on whitespace and
    understands C-style escapes inside double quotes, so ``%`` becomes ``%%``, ``$`` becomes
    ``$$``, and anything but plain characters is double-quoted with ``\\`` and ``"`` escaped.

    Example: ``quote_word('{"a": 1}')`` -> ``"{\\"a\\": 1}"``.
    """
    word = word.replace("%", "%%").replace("$", "$$")
    if word and _PLAIN.match(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_line(argv: list[str], indent: str = "    ") -> str:
    """Join ``argv`` into an ``Exec*=`` value, one argument per continued line after the first.

    Options and their values stay on one line (``--device /dev/kfd``) so that people can
    read the unit the way they would type the command; so do the words of a command, at the start
    and after a ``--`` that passes the rest to another command (``-- /usr/bin/docker run``).
    """
    lines: list[list[str]] = []
    for word in argv:
        quoted = quote_word(word)
        last = lines[-1] if lines else []
        option_value = len(last) == 1 and last[0].startswith("-") and last[0] != "--"
        # the command words at the start, and after a "--" that hands the rest to another command
        command = last[1:] if last[:1] == ["--"] else last
        leading_word = (len(lines) == 1 or last[:1] == ["--"]) and not any(w.startswith("-") for w in command)
        if not word.startswith("-") and (option_value or leading_word):
            lines[-1].append(quoted)
        else:
            lines.append([quoted])
    return (" \\\n" + indent).join(" ".join(line) for line in lines)
