"""``rocmfleet vault encrypt-string NAME`` and ``rocmfleet vault rekey FILE...``: ansible-vault helpers."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from rocmfleet.config import vault


def add(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``, the ``rocmfleet`` parser's subcommands."""
    v = sub.add_parser("vault", help="ansible-vault helpers (ansible-core's library, not the binary)")
    vsub = v.add_subparsers(dest="vault_command", required=True)
    e = vsub.add_parser(
        "encrypt-string",
        help="encrypt stdin as an inline `!vault |` value",
        epilog="the password: ROCMFLEET_VAULT_PASSWORD_FILE or ANSIBLE_VAULT_PASSWORD_FILE (a file, or an executable "
        "that prints it). exit status: 0 printed; 2 no password configured or an empty value",
    )
    e.add_argument("name", help="the YAML key to print, e.g. HF_TOKEN")
    e.set_defaults(func=encrypt_string)
    r = vsub.add_parser(
        "rekey",
        help="re-encrypt files with a new password",
        epilog="exit status: 0 every file rekeyed; 2 none was (every file or none)",
    )
    r.add_argument("--new-password-file", required=True)
    r.add_argument("files", nargs="+", help="group files with inline `!vault |` values, or wholly encrypted")
    r.set_defaults(func=rekey_files)


def encrypt_string(args: argparse.Namespace) -> int:
    if sys.stdin is None:
        print(f"rocmfleet: {args.name}: standard input is closed: pipe the secret in", file=sys.stderr)
        return 2
    secret = sys.stdin.read().rstrip("\n") if not sys.stdin.isatty() else getpass.getpass(f"{args.name}: ")
    if not secret:
        print(f"rocmfleet: {args.name}: empty secret (nothing on stdin)", file=sys.stderr)
        return 2
    try:
        print(f"{args.name}: {vault.inline(secret)}", end="")
    except vault.VaultError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
    return 0


def rekey_files(args: argparse.Namespace) -> int:
    """Re-encrypt every file, or none: each is re-encrypted in a scratch copy before any is replaced."""
    import shutil
    import tempfile

    old = vault.password_file()
    if old is None:
        print(
            "rocmfleet: set ROCMFLEET_VAULT_PASSWORD_FILE (or ANSIBLE_VAULT_PASSWORD_FILE) to the current password"
            " file",
            file=sys.stderr,
        )
        return 2
    path = Path(args.new_password_file)
    try:
        new = path.read_bytes().strip()
        if not new:
            raise vault.VaultError(f"--new-password-file {path}: empty; a vault password cannot be empty")
        path = old
        current = old.read_bytes().strip()
        with tempfile.TemporaryDirectory(prefix="rocmfleet-rekey-") as scratch:
            done = []
            for index, path in enumerate(map(Path, args.files)):
                copy = Path(scratch) / f"{index}.yml"
                shutil.copyfile(path, copy)
                try:
                    count = vault.rekey(copy, current, new)
                except vault.VaultError as exc:  # name the user's file, not the scratch copy
                    raise vault.VaultError(str(exc).replace(str(copy), str(path))) from None
                done.append((path, copy, count))
            for path, copy, count in done:
                path.write_text(copy.read_text())
                print(f"{path}: {count} vault value(s) re-encrypted")
    except vault.VaultError as exc:
        print(f"rocmfleet: {exc} (no file was changed)", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"rocmfleet: {path}: {exc.strerror or exc} (no file was changed)", file=sys.stderr)
        return 2
    return 0
