from __future__ import annotations

import pytest

from rocmfleet.config import ConfigError, settings_for
from tests.unit.conftest import DIGEST


def test_lab_data_validates_and_ignores_connection_keys(lab_data):
    settings = settings_for("lab-1", lab_data)
    assert settings.image_reference == f"10.213.0.1:5000/rocmfleet-lab/vllm-cpu:0.32.0-lab.1@{DIGEST}"
    assert settings.vllm_instances[0].port == 8000


def test_every_problem_is_reported_with_host_key_and_value(lab_data):
    lab_data["vllm_image_digest"] = "latest"
    lab_data["vllm_instances"] = [{"name": "a", "port": 8000}, {"name": "b", "port": "eighty"}]
    lab_data["docker_source"] = "snap"
    with pytest.raises(ConfigError) as err:
        settings_for("lab-2", lab_data)
    message = str(err.value)
    assert message.startswith("host lab-2: invalid configuration (3 problem(s)):")
    assert "vllm_image_digest: String should match pattern '^sha256:[0-9a-f]{64}$' (got 'latest')" in message
    assert "vllm_instances.1.port: Input should be a valid integer" in message
    assert "docker_source: Input should be 'docker' or 'debian' (got 'snap')" in message


def test_unknown_key_with_our_prefix_is_an_error(lab_data):
    lab_data["vllm_imag_tag"] = "x"
    with pytest.raises(ConfigError, match="vllm_imag_tag: Extra inputs are not permitted"):
        settings_for("lab-1", lab_data)


def test_duplicate_ports_are_refused(lab_data):
    lab_data["vllm_instances"] = [{"name": "a", "port": 8000}, {"name": "b", "port": 8000}]
    with pytest.raises(ConfigError, match="port used more than once: 8000"):
        settings_for("lab-1", lab_data)


def test_missing_required_key_is_named(lab_data):
    del lab_data["vllm_model"]
    with pytest.raises(ConfigError, match="vllm_model: Field required"):
        settings_for("lab-1", lab_data)
