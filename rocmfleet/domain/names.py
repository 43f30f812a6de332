"""Names an operator reads and tools use as paths: invisible and look-alike characters refused (pure).

A host, instance or served name is compared by its code points: ``llama`` and ``llаma`` (the
second ``а`` is U+0430, Cyrillic) are two names that print the same, and a zero-width space
makes a third. Unicode Technical Standard #39 (Unicode Security Mechanisms,
https://www.unicode.org/reports/tr39/, §5 "Mixed-Script Detection") names both: characters
that render nothing, and letters of several scripts in one identifier. This module applies
the simple form of its rule: one script per name, where a letter's script is the first word of
its Unicode name (``LATIN``, ``CYRILLIC``, ``GREEK``, ``FULLWIDTH``...), with Han, Hiragana,
Katakana and Hangul counted as one, and Latin beside them allowed (UTS #39 §5.2, the "Highly
Restrictive" level: ``qwen-中文``). Non-ASCII names of one script (``tiny-llama-é``) stay valid.

Example::

    >>> lookalike_problem("llama")
    >>> lookalike_problem("ll\u0430ma")
    "mixes CYRILLIC and LATIN letters ('\u0430' is U+0430 CYRILLIC SMALL LETTER A): a look-alike of another name"
"""

from __future__ import annotations

import unicodedata

#: General categories that render nothing or are not characters (Unicode 15, UAX #44 §5.7.1):
#: control, format (zero-width and bidirectional marks), surrogate, private use, unassigned,
#: line and paragraph separators.
INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
#: A directory name's longest on Linux (``NAME_MAX``, 255 bytes) less room for a suffix, and
#: DNS's longest name (RFC 1035 §2.3.4): results are kept in one directory per host.
MAX_HOST_NAME_BYTES = 253
#: Scripts written together in one word (UTS #39 §5.1, augmented script sets ``Jpan``, ``Kore``),
#: with the first words of the Unicode names of their shared marks (``ー`` KATAKANA-HIRAGANA
#: PROLONGED SOUND MARK, ``々`` IDEOGRAPHIC ITERATION MARK).
_CJK = frozenset({"CJK", "HIRAGANA", "KATAKANA", "HANGUL", "KATAKANA-HIRAGANA", "IDEOGRAPHIC"})
#: Default-ignorable code points that the categories above miss (UAX #44
#: ``Default_Ignorable_Code_Point``, DerivedCoreProperties.txt): combining grapheme joiner,
#: Hangul fillers, variation selectors, and the blank braille pattern, which renders as a space.
_BLANK = frozenset({0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x3164, 0xFFA0, 0x2800}) | frozenset(
    [*range(0x180B, 0x1810), *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]
)


def _described(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}"


def lookalike_problem(name: str) -> str | None:
    """Why ``name`` holds an invisible character or mixes scripts, or None.

    Args:
        name: a host, instance or served model name as written.

    Returns:
        The first problem, e.g. ``"holds an invisible character (U+200B ZERO WIDTH SPACE)"``.
    """
    for char in name:
        category = unicodedata.category(char)
        if category in INVISIBLE or (category == "Zs" and char != " ") or ord(char) in _BLANK:
            return f"holds an invisible character ({_described(char)})"
    if unicodedata.normalize("NFKC", name) != name:  # é as e + U+0301, fullwidth and halfwidth forms
        odd = next((c for c in name if unicodedata.normalize("NFKC", c) != c), name[-1])
        return (
            f"is not in Unicode normal form NFKC ({_described(odd)}): it looks like "
            f"{unicodedata.normalize('NFKC', name)!r}, another name; write that"
        )
    scripts: dict[str, str] = {}
    for char in name:
        if char.isalpha() or (char.isdigit() and not char.isascii()):
            script = unicodedata.name(char, "UNKNOWN").split()[0]
            scripts.setdefault("CJK" if script in _CJK else script, char)
    if len(scripts) > 1 and set(scripts) != {"LATIN", "CJK"}:  # UTS #39 §5.2 "Highly Restrictive"
        names = sorted(scripts)
        odd = next(c for s, c in scripts.items() if s != "LATIN") if "LATIN" in scripts else scripts[names[-1]]
        return f"mixes {' and '.join(names)} letters ({odd!r} is {_described(odd)}): a look-alike of another name"
    return None


def host_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a host's inventory name, or None: a results directory is named after
    it (``/``, ``.``, ``..``, over :data:`MAX_HOST_NAME_BYTES`), or :func:`lookalike_problem`.

    Whether it is also a valid address is :func:`rocmfleet.config.connection.address_problem`'s rule,
    applied when no ``ssh_hostname`` is given.
    """
    if name in (".", "..") or "/" in name or "\\" in name:
        return "cannot be a directory name (results are kept in one per host): no '/', '\\', '.' or '..'"
    if len(name.encode()) > MAX_HOST_NAME_BYTES:
        return f"is {len(name.encode())} bytes long: at most {MAX_HOST_NAME_BYTES} (DNS's limit; a directory name)"
    return lookalike_problem(name)
