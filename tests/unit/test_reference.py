from __future__ import annotations

from rocmfleet import reference


def test_readme_configuration_reference_is_generated_from_the_models():
    text = reference.README.read_text()
    assert reference.readme_with_reference(text) == text, "run `python -m rocmfleet.reference`"


def test_json_schema_file_is_current():
    assert reference.SCHEMA.read_text() == reference.json_schema(), "run `python -m rocmfleet.reference`"


def test_every_field_has_a_description():
    table = reference.markdown_table()
    assert all(not row.endswith("|  |") for row in table.splitlines()), table
