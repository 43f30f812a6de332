"""The ``rocmfleet`` command.

rocmfleet validate INVENTORY          check every host's data; exit 2 on any problem
rocmfleet vault encrypt-string NAME   read a secret on stdin, print `NAME: !vault |` YAML
rocmfleet vault rekey FILE...         re-encrypt vault data with a new password
rocmfleet schema                      print the JSON Schema of host data (for editors)
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path

from rocmfleet import vault


def _validate(args: argparse.Namespace) -> int:
    from rocmfleet.validate import EXIT_INVALID, InventoryError, report, validate_inventory

    try:
        configs, problems = validate_inventory(args.inventory)
    except InventoryError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if problems:
        print(report(problems), file=sys.stderr)
        return EXIT_INVALID
    for name, config in configs.items():
        instances = ", ".join(f"{i.name}:{i.port}" for i in config.instances())
        print(f"{name}: ok ({config.profile.name}, {config.image.reference}; {instances})")
    return 0


def _encrypt_string(args: argparse.Namespace) -> int:
    secret = sys.stdin.read().rstrip("\n") if not sys.stdin.isatty() else getpass.getpass(f"{args.name}: ")
    try:
        print(f"{args.name}: {vault.inline(secret)}", end="")
    except vault.VaultError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
    return 0


def _rekey(args: argparse.Namespace) -> int:
    old = vault.password_file()
    if old is None:
        print("rocmfleet: set ROCMFLEET_VAULT_PASSWORD_FILE to the current password file", file=sys.stderr)
        return 2
    new = Path(args.new_password_file).read_bytes().strip()
    try:
        for path in args.files:
            count = vault.rekey(Path(path), old.read_bytes().strip(), new)
            print(f"{path}: {count} vault value(s) re-encrypted")
    except vault.VaultError as exc:
        print(f"rocmfleet: {exc}", file=sys.stderr)
        return 2
    return 0


def _schema(_args: argparse.Namespace) -> int:
    from rocmfleet.settings import HostSettings

    print(json.dumps(HostSettings.model_json_schema(), indent=2, sort_keys=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rocmfleet`` console script; returns the exit status."""
    parser = argparse.ArgumentParser(prog="rocmfleet", description="MI300X vLLM fleet toolkit")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="validate an inventory and its group_vars before any connection")
    p.add_argument("inventory")
    p.set_defaults(func=_validate)
    v = sub.add_parser("vault", help="ansible-vault helpers (ansible-core's library, not the binary)")
    vsub = v.add_subparsers(dest="vault_command", required=True)
    e = vsub.add_parser("encrypt-string", help="encrypt stdin as an inline `!vault |` value")
    e.add_argument("name", help="the YAML key to print, e.g. HF_TOKEN")
    e.set_defaults(func=_encrypt_string)
    r = vsub.add_parser("rekey", help="re-encrypt files with a new password")
    r.add_argument("--new-password-file", required=True)
    r.add_argument("files", nargs="+")
    r.set_defaults(func=_rekey)
    s = sub.add_parser("schema", help="print the JSON Schema of host data")
    s.set_defaults(func=_schema)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
