from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rocmfleet.config import groupvars, vault

PASSWORD = b"unit-test-password"
TOKEN = "hf_UNITtestTOKEN0123456789"


@pytest.fixture
def password_file(tmp_path, monkeypatch):
    path = tmp_path / "vault-pass"
    path.write_bytes(PASSWORD + b"\n")
    monkeypatch.setenv("ROCMFLEET_VAULT_PASSWORD_FILE", str(path))
    return path


def test_secret_never_prints():
    secret = vault.Secret(TOKEN)
    assert TOKEN not in f"{secret} {secret!r} {[secret]} { ({'k': secret}) }"
    assert secret.reveal() == TOKEN


def test_pyinfra_debug_inventory_shows_the_mask(tmp_path):
    inventory = tmp_path / "inventory.py"
    (tmp_path / "g.yml").write_text(
        "vllm_secret_env:\n  HF_TOKEN: " + vault.inline(TOKEN, PASSWORD).replace("\n  ", "\n    ")
    )
    (tmp_path / "pw").write_bytes(PASSWORD)
    inventory.write_text(
        "from pathlib import Path\nfrom rocmfleet.config.groupvars import load_group_vars\n"
        f"web = (['h1'], load_group_vars('g', Path({str(tmp_path)!r})))\n"
    )
    env = {**os.environ, "ROCMFLEET_VAULT_PASSWORD_FILE": str(tmp_path / "pw")}
    proc = subprocess.run(
        [sys.executable, "-m", "pyinfra", "--debug", str(inventory), "debug-inventory", "--json"],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert TOKEN not in proc.stdout + proc.stderr
    assert json.loads(proc.stdout)[0]["data"]["vllm_secret_env"] == {"HF_TOKEN": vault.MASK}


def test_inline_vault_value_decrypts_to_a_secret(tmp_path, password_file):
    block = vault.inline(TOKEN, PASSWORD).replace("\n  ", "\n    ")  # nested one level deeper
    (tmp_path / "g.yml").write_text("vllm_secret_env:\n  HF_TOKEN: " + block)
    data = groupvars.load_group_vars("g", tmp_path)
    secret = data["vllm_secret_env"]["HF_TOKEN"]
    assert isinstance(secret, vault.Secret) and secret.reveal() == TOKEN
    assert TOKEN not in repr(data)


def test_whole_file_vault_decrypts_values_to_secrets(tmp_path, password_file):
    (tmp_path / "g.yml").write_text(vault.encrypt(f"registry_password: {TOKEN}\n", PASSWORD))
    data = groupvars.load_group_vars("g", tmp_path)
    assert data["registry_password"].reveal() == TOKEN


def test_whole_file_vault_holds_secrets_at_any_depth_and_only_secrets(tmp_path, password_file):
    from rocmfleet.config.settings import ConfigError, host_config

    (tmp_path / "g.yml").write_text(vault.encrypt(f"vllm_secret_env:\n  HF_TOKEN: {TOKEN}\n", PASSWORD))
    secrets = groupvars.load_group_vars("g", tmp_path)
    config = host_config({"vllm_profile": "llama-4-scout", **secrets})
    assert config.settings.vllm_secret_env["HF_TOKEN"].reveal() == TOKEN

    (tmp_path / "h.yml").write_text(vault.encrypt("vllm_profile: llama-4-scout\n", PASSWORD))
    with pytest.raises(ConfigError) as exc:
        host_config(groupvars.load_group_vars("h", tmp_path))
    (problem,) = exc.value.problems
    assert problem.key == "vllm_profile" and "a wholly encrypted group file may hold only those" in problem.message
    assert problem.value == "*MASKED*"


def test_wrong_password_names_file_and_line_not_the_secret(tmp_path, password_file):
    (tmp_path / "g.yml").write_text("a: 1\nb: " + vault.inline(TOKEN, b"other"))
    groupvars.reset()
    groupvars.load_group_vars("g", tmp_path)
    (problem,) = groupvars.problems()
    assert str(problem) == f"{tmp_path / 'g.yml'}: b: line 2: cannot decrypt (wrong vault password)"


def test_no_password_configured_is_a_clear_error(tmp_path, monkeypatch):
    for name in vault.PASSWORD_FILE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "g.yml").write_text("b: " + vault.inline(TOKEN, PASSWORD))
    groupvars.reset()
    groupvars.load_group_vars("g", tmp_path)
    (problem,) = groupvars.problems()
    assert "no vault password: set ROCMFLEET_VAULT_PASSWORD_FILE" in str(problem)


def test_rekey_inline_and_whole_file(tmp_path, password_file):
    inline = tmp_path / "inline.yml"
    inline.write_text("x: 1\nnested:\n  t: " + vault.inline(TOKEN, PASSWORD).replace("\n  ", "\n    ") + "y: 2\n")
    whole = tmp_path / "whole.yml"
    whole.write_text(vault.encrypt("t: secret\n", PASSWORD))
    assert vault.rekey(inline, PASSWORD, b"new") == 1
    assert vault.rekey(whole, PASSWORD, b"new") == 1
    password_file.write_bytes(b"new")
    data = groupvars.load_group_vars("inline", tmp_path)
    assert data["nested"]["t"].reveal() == TOKEN and data["x"] == 1 and data["y"] == 2
    assert groupvars.load_group_vars("whole", tmp_path)["t"].reveal() == "secret"


def test_an_empty_password_is_refused(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    monkeypatch.setenv("ROCMFLEET_VAULT_PASSWORD_FILE", str(empty))
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    with pytest.raises(vault.VaultError, match="empty; a vault password cannot be empty"):
        vault.encrypt("secret")


def test_an_executable_password_file_is_run_and_its_output_is_the_password(tmp_path, monkeypatch):
    # Ansible's rule (get_file_vault_secret): an executable password file is a script.
    script = tmp_path / "vault-pass.sh"
    script.write_text(f"#!/bin/sh\necho {PASSWORD.decode()}\n")
    script.chmod(0o700)
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(script))
    monkeypatch.delenv("ROCMFLEET_VAULT_PASSWORD_FILE", raising=False)
    blob = vault.encrypt(TOKEN, PASSWORD)
    assert vault.decrypt(blob, "g.yml: x") == TOKEN


def test_vault_ids_from_the_identity_list_and_a_missing_id_named(tmp_path, monkeypatch):
    prod = tmp_path / "prod-pass"
    prod.write_text("prod-password\n")
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    monkeypatch.delenv("ROCMFLEET_VAULT_PASSWORD_FILE", raising=False)
    monkeypatch.setenv("ANSIBLE_VAULT_IDENTITY_LIST", f"prod@{prod}")
    lib = vault.VaultLib([("prod", vault.VaultSecret(b"prod-password"))])
    blob = lib.encrypt(TOKEN, vault_id="prod").decode()
    assert blob.startswith("$ANSIBLE_VAULT;1.2;AES256;prod")
    assert vault.decrypt(blob, "g.yml: x") == TOKEN
    other = vault.VaultLib([("dev", vault.VaultSecret(b"dev-password"))]).encrypt(TOKEN, vault_id="dev").decode()
    with pytest.raises(vault.VaultError) as info:
        vault.decrypt(other, "g.yml: x")
    assert str(info.value) == (
        "g.yml: x: cannot decrypt (encrypted with vault id 'dev', and no password of that id is given (ids given: "
        "prod; ANSIBLE_VAULT_IDENTITY_LIST=dev@FILE))"
    )
    assert TOKEN not in str(info.value)


@pytest.mark.parametrize("how", ["executable password file", "vault id"])
def test_the_labs_secret_decrypts_with_an_executable_password_file_and_with_a_vault_id(tmp_path, monkeypatch, how):
    """``group_vars/lab.yml``'s ``!vault`` HF token, read as an operator would give its password."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "vault-pass.sh"  # a password manager's client, as Ansible runs one
    script.write_text(f"#!/bin/sh\ncat {root / 'tests' / 'lab' / 'vault-password'}\n")
    script.chmod(0o700)
    for variable in (*vault.PASSWORD_FILE_VARIABLES, vault.IDENTITY_LIST_VARIABLE):
        monkeypatch.delenv(variable, raising=False)
    if how == "vault id":
        monkeypatch.setenv(vault.IDENTITY_LIST_VARIABLE, f"lab@{script}")
    else:
        monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(script))
    monkeypatch.setattr(groupvars, "LOADED", [])
    data = groupvars.load_group_vars("lab", root / "group_vars")
    assert groupvars.problems() == []
    secret = data["vllm_secret_env"]["HF_TOKEN"]
    assert isinstance(secret, vault.Secret) and secret.reveal() == "hf_rocmfleetLabToken4242XYZ"
