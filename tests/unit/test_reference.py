from __future__ import annotations

import json

from rocmfleet.config import reference
from rocmfleet.project import SKELETON_DIR


def test_readme_configuration_reference_is_generated_from_the_models():
    text = reference.README.read_text()
    assert reference.readme_with_reference(text) == text, "run `python -m rocmfleet.config.reference`"


def test_json_schema_file_is_current():
    assert reference.SCHEMA.read_text() == reference.json_schema(), "run `python -m rocmfleet.config.reference`"


def test_every_field_has_a_description():
    table = reference.markdown_table()
    assert all(not row.endswith("|  |") for row in table.splitlines()), table


def test_shipped_group_vars_validate_against_the_schema():
    """What an editor's YAML language server would say about the shipped files (vault values aside)."""
    import jsonschema
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!vault", lambda loader, node: "vault-value")
    schema = json.loads(reference.json_schema())
    # this checkout's group files and those `rocmfleet init` writes
    files = sorted(reference.ROOT.glob("group_vars/*.yml")) + sorted(SKELETON_DIR.glob("group_vars/*.yml"))
    assert len(files) >= 5
    for path in files:
        data = yaml.load(path.read_text(), Loader=Loader) or {}
        errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(data)]
        assert not errors, f"{path.name}: {errors}"


def test_schema_refuses_unknown_keys_but_allows_pyinfras():
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(reference.json_schema()))
    assert not list(validator.iter_errors({"ssh_user": "root", "_sudo": True, "rocm_version": "7.2"}))
    assert [e.message for e in validator.iter_errors({"rocm_verison": "7.2"})] == [
        "'rocm_verison' does not match any of the regexes: '^(ssh_|_)'"
    ]


def test_cli_reference_is_generated_from_the_parser():
    from tools import clidoc

    assert clidoc.PAGE.read_text() == clidoc.markdown(), f"run `{clidoc.COMMAND}`"
    assert clidoc.CHECKS_PAGE.read_text() == clidoc.checks_markdown(), f"run `{clidoc.COMMAND}`"
    assert "|  |" not in clidoc.CHECKS_PAGE.read_text(), "every check says what it asserts (its docstring)"


def test_every_command_states_its_exit_statuses():
    from tools import clidoc

    for name, parser in clidoc.commands(clidoc.build_parser(), "rocmfleet")[1:]:
        if parser._subparsers is None:  # a command that runs (not a group such as `cache`)
            assert parser.epilog and "exit status: " in parser.epilog, name


def test_the_docs_build_strict(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(reference.ROOT / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()


def test_the_readme_stays_a_guide():
    lines = (reference.ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 200
    assert "./dev test" in lines and "./dev lab" in lines  # the newcomer's two commands


def _documented_commands() -> list[tuple[str, str]]:
    """``(file, command line)`` of every ``rocmfleet`` line in a fenced block of the README and docs/."""
    import shlex

    found = []
    for path in [reference.ROOT / "README.md", *sorted((reference.ROOT / "docs").rglob("*.md"))]:
        fenced = False
        for line in path.read_text().splitlines():
            if line.startswith("```"):
                fenced = not fenced
                continue
            if not fenced or "rocmfleet " not in line or line.rstrip().endswith("\\"):
                continue
            words = shlex.split(line, comments=True)
            if words and words[0].endswith("rocmfleet") and "cd" not in words:
                found.append((path.name, " ".join(words[1:])))
    return found


def test_every_documented_command_is_one_the_parser_takes():
    """The command lines the README and the docs show parse as written (an option renamed or removed fails)."""
    from rocmfleet.entry import build_parser

    commands = _documented_commands()
    assert len(commands) >= 15
    for name, line in commands:
        try:
            build_parser().parse_args(line.split())
        except SystemExit as exc:
            assert exc.code == 0, f"{name}: rocmfleet {line}"  # --help and --version exit 0
