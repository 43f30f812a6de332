"""Secrets in ``group_vars``: ansible-vault files and inline ``!vault`` values.

Decryption uses ansible-core's vault library (``ansible.parsing.vault.VaultLib``), never the
``ansible-vault`` binary. The password comes from the file named by
``ROCMFLEET_VAULT_PASSWORD_FILE`` or, as Ansible users expect, ``ANSIBLE_VAULT_PASSWORD_FILE``
(an executable file is run and its output is the password, as in Ansible), and from the vault ids
of ``ANSIBLE_VAULT_IDENTITY_LIST`` (``prod@/path/to/prod-pass,dev@/path/script``).
Decrypted values are :class:`Secret` objects: they print as ``*MASKED*`` everywhere (pyinfra's
output with ``-v``/``--debug``, ``debug-inventory``, exceptions, validation errors) and give
their text only through :meth:`Secret.reveal`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Protocol


def _import_vault() -> ModuleType:
    """Import ansible's vault library quietly under gevent (pyinfra monkey-patches sockets).

    ansible-core probes ``socket.getaddrinfo`` with invalid arguments at import
    (``ansible/module_utils/_internal/_patches/_socket_patch.py``); gevent's hub prints that
    expected ``OSError`` as a traceback. Silence the hub for the import only.
    """
    try:
        import gevent

        hub = gevent.get_hub()
        saved = hub.print_exception
        hub.print_exception = lambda *args: None
    except ImportError:
        hub = None
    # ansible-core creates ~/.ansible/tmp when it is imported (DEFAULT_LOCAL_TMP) and raises where HOME
    # is not writable (a service account, a read-only home): rocmfleet needs none of it, so such a
    # user gets a private temporary directory instead of a traceback before any command runs.
    home = Path(os.path.expanduser("~/.ansible"))
    if "ANSIBLE_LOCAL_TEMP" not in os.environ and not os.access(home if home.exists() else home.parent, os.W_OK):
        os.environ["ANSIBLE_LOCAL_TEMP"] = tempfile.mkdtemp(prefix="rocmfleet-ansible-")
    try:
        from ansible.parsing import vault as ansible_vault
    finally:
        if hub is not None:
            hub.print_exception = saved
    module: ModuleType = ansible_vault
    return module


_ansible_vault = _import_vault()
AnsibleVaultError = _ansible_vault.AnsibleVaultError
VaultLib = _ansible_vault.VaultLib
VaultSecret = _ansible_vault.VaultSecret
is_encrypted = _ansible_vault.is_encrypted

PASSWORD_FILE_VARIABLES = ("ROCMFLEET_VAULT_PASSWORD_FILE", "ANSIBLE_VAULT_PASSWORD_FILE")
MASK = "*MASKED*"


class VaultError(ValueError):
    """A vault value cannot be decrypted; the message names the file and why, never the secret.

    ``reason`` is the why alone (``wrong vault password``), for messages that name the place.
    """

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class Secret:
    """A decrypted secret: prints as ``*MASKED*``; :meth:`reveal` gives the text.

    Example:

    .. code:: python

        token = Secret("hf_abc")
        f"{token}"       # '*MASKED*'
        token.reveal()   # 'hf_abc'
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret's text; write it only to files of mode 0600."""
        return self._value

    def __repr__(self) -> str:
        return MASK

    __str__ = __repr__

    def to_json(self) -> str:
        """What pyinfra's JSON output (``--json``, ``debug-inventory``) shows: the mask."""
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def password_file() -> Path | None:
    """The vault password file named by the environment, or None when none is set."""
    for variable in PASSWORD_FILE_VARIABLES:
        if os.environ.get(variable):
            return Path(os.environ[variable])
    return None


#: Ansible's list of vault ids, ``label@source`` comma-separated (``ansible.cfg``'s
#: ``vault_identity_list``; ansible-core ``lib/ansible/config/base.yml``, DEFAULT_VAULT_IDENTITY_LIST).
IDENTITY_LIST_VARIABLE = "ANSIBLE_VAULT_IDENTITY_LIST"


def identities() -> list[tuple[str, str]]:
    """Every configured vault id as ``(label, source file)``, as Ansible reads them: the password
    file (:func:`password_file`) as label ``default``, then each ``label@file`` of
    ``$ANSIBLE_VAULT_IDENTITY_LIST`` (a bare ``file`` is label ``default``).

    Raises:
        VaultError: an entry of the list names no file.
    """
    found: list[tuple[str, str]] = []
    path = password_file()
    if path is not None:
        found.append(("default", str(path)))
    for entry in filter(None, (e.strip() for e in os.environ.get(IDENTITY_LIST_VARIABLE, "").split(","))):
        label, sep, source = entry.partition("@")
        label, source = (label, source) if sep else ("default", label)
        if not source:
            raise VaultError(f"{IDENTITY_LIST_VARIABLE} entry {entry!r}: expected LABEL@FILE")
        found.append((label, source))
    return found


class LoadedSecret(Protocol):
    """What ansible's vault secrets have once loaded (ansible-core ships no type information)."""

    @property
    def bytes(self) -> bytes: ...


def _secret(label: str, source: str) -> LoadedSecret:
    """The secret of one vault id, loaded with ansible-core's own rules
    (``ansible.parsing.vault.get_file_vault_secret``): an executable file is a script whose standard
    output is the password (a ``*-client`` script is asked for the label), any other file holds it.
    ``prompt`` (Ansible's ``--vault-id label@prompt``) is not offered: a deploy may run unattended."""
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader

    if source == "prompt":
        raise VaultError(f"vault id {label}@prompt: rocmfleet never prompts; give a password file or script")
    try:
        secret = _ansible_vault.get_file_vault_secret(filename=source, vault_id=label, loader=DataLoader())
        secret.load()
    except AnsibleError as exc:
        if "Invalid vault password" in str(exc):  # ansible-core's verify_secret_is_not_empty
            raise VaultError(f"vault password file {source}: empty; a vault password cannot be empty") from None
        raise VaultError(f"vault id {label}: {str(exc).splitlines()[0]}") from None
    if not secret.bytes:
        raise VaultError(f"vault password file {source}: empty; a vault password cannot be empty")
    loaded: LoadedSecret = secret
    return loaded


class Vault(Protocol):
    """What rocmfleet calls of ansible's ``VaultLib`` (ansible-core ships no type information)."""

    def decrypt(self, vaulttext: bytes | str) -> bytes: ...
    def encrypt(self, plaintext: bytes | str) -> bytes: ...


def vault_lib(password: bytes | None = None) -> Vault:
    """A ``VaultLib`` holding ``password`` (default: read from :func:`password_file`).

    Raises:
        VaultError: no password given and none configured, the file cannot be read, or the
            password is empty (ansible-vault refuses an empty one too).
    """
    if password is None:
        configured = identities()
        if not configured:
            raise VaultError(
                "no vault password: set ROCMFLEET_VAULT_PASSWORD_FILE (or ANSIBLE_VAULT_PASSWORD_FILE) to a file "
                f"holding the password or a script printing it, or {IDENTITY_LIST_VARIABLE} to LABEL@FILE,..."
            )
        key = tuple(configured)
        if key not in _LOADED:  # a password script runs once per process, not once per value
            _LOADED[key] = VaultLib([(label, _secret(label, source)) for label, source in configured])
        return _LOADED[key]
    if not password:
        raise VaultError("a vault password cannot be empty")
    lib: Vault = VaultLib([("default", VaultSecret(password))])
    return lib


#: The configured vaults already loaded in this process, by their ``(label, source)`` list.
_LOADED: dict[tuple[tuple[str, str], ...], Vault] = {}


def _label(data: bytes | str) -> str | None:
    """The vault id a blob was encrypted with (format 1.2 headers name it), or None."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    header = text.lstrip().split("\n", 1)[0].split(";")
    return header[3].strip() if len(header) > 3 and header[1] == "1.2" else None


def decrypt(data: bytes | str, source: str, vault: Vault | None = None) -> str:
    """Decrypt one vault blob (a whole file or an inline value).

    Args:
        data: the ``$ANSIBLE_VAULT;1.1;AES256`` armored text.
        source: where it came from, for the error message (``group_vars/prod.yml: hf_token``).
        vault: a ``VaultLib``; default :func:`vault_lib`.

    Raises:
        VaultError: wrong password, or the blob is damaged.
    """
    vault = vault or vault_lib()
    try:
        return vault.decrypt(data).decode()
    except AnsibleVaultError as exc:
        reason = "wrong vault password" if "no vault secrets" in str(exc) else "damaged vault data"
        labels = [label for label, _ in identities()]
        if reason == "wrong vault password" and (wanted := _label(data)) and wanted not in labels:
            reason = (
                f"encrypted with vault id {wanted!r}, and no password of that id is given (ids given: "
                f"{', '.join(labels) or 'none'}; {IDENTITY_LIST_VARIABLE}={wanted}@FILE)"
            )
        raise VaultError(f"{source}: cannot decrypt ({reason})", reason) from None
    except Exception:  # noqa: BLE001 - ansible raises several types for malformed blobs
        raise VaultError(f"{source}: cannot decrypt (damaged vault data)", "damaged vault data") from None


def encrypt(text: str, password: bytes | None = None) -> str:
    """Encrypt ``text`` as an ansible-vault 1.1 AES256 blob (what ``!vault |`` holds)."""
    return vault_lib(password).encrypt(text).decode()


def inline(text: str, password: bytes | None = None) -> str:
    """``text`` encrypted as a YAML ``!vault |`` block, ready to paste under a key."""
    body = encrypt(text, password)
    return "!vault |\n" + "".join(f"  {line}\n" for line in body.splitlines())


def rekey(path: Path, old: bytes, new: bytes) -> int:
    """Re-encrypt every vault blob in ``path`` (whole file or inline values) with ``new``.

    Returns:
        How many blobs were re-encrypted.

    Raises:
        VaultError: a blob does not decrypt with ``old``.
    """
    text = path.read_text()
    old_vault, new_vault = vault_lib(old), vault_lib(new)
    if is_encrypted(text):
        path.write_text(new_vault.encrypt(decrypt(text, str(path), old_vault)).decode())
        return 1
    out: list[str] = []
    count = 0
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if not line.rstrip().endswith("!vault |"):
            continue
        indent = None
        block: list[str] = []
        while i < len(lines) and (lines[i].strip() == "" or lines[i].startswith(" ")):
            current = len(lines[i]) - len(lines[i].lstrip())
            if indent is None:
                indent = current
            if lines[i].strip() and current < indent:
                break
            block.append(lines[i].strip())
            i += 1
        plain = decrypt("\n".join(b for b in block if b), f"{path}", old_vault)
        pad = " " * (indent or 2)
        out += [f"{pad}{row}\n" for row in new_vault.encrypt(plain).decode().splitlines()]
        count += 1
    path.write_text("".join(out))
    return count
