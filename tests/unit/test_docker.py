from __future__ import annotations

import json

import pytest

from rocmfleet.config.settings import ConfigError, host_config
from rocmfleet.domain import docker
from rocmfleet.domain.docker import daemon_json


def test_daemon_json_merges_defaults_overrides_and_registries(lab_data):
    lab_data["docker_daemon"] = {"log-opts": {"max-size": "10m"}, "data-root": "/srv/docker"}
    lab_data["docker_insecure_registries"] = ["b:5000", "a:5000", "b:5000"]
    text = daemon_json(host_config(lab_data).settings)
    assert text.endswith("}\n")
    data = json.loads(text)
    assert data["live-restore"] is True
    # the user's max-size wins, our max-file stays (it was dropped before issue 11)
    assert data["log-opts"] == {"max-size": "10m", "max-file": "3"}
    assert data["data-root"] == "/srv/docker"
    assert data["insecure-registries"] == ["a:5000", "b:5000"]


def test_log_opts_of_another_driver_are_not_mixed_with_json_file_options(lab_data):
    lab_data["docker_daemon"] = {"log-driver": "journald", "log-opts": {"tag": "{{.Name}}"}}
    data = json.loads(daemon_json(host_config(lab_data).settings))
    assert data["log-driver"] == "journald"
    assert data["log-opts"] == {"tag": "{{.Name}}"}  # journald refuses max-size/max-file


def test_escape_hatch_keys_are_written_as_given(lab_data):
    lab_data["docker_daemon_extra"] = {"seccomp-profile": "/etc/docker/seccomp.json"}
    data = json.loads(daemon_json(host_config(lab_data).settings))
    assert data["seccomp-profile"] == "/etc/docker/seccomp.json"


def test_daemon_json_is_stable(lab_data):
    one = daemon_json(host_config(lab_data).settings)
    assert one == daemon_json(host_config(dict(reversed(lab_data.items()))).settings)


@pytest.mark.parametrize(
    ("daemon", "line"),
    [
        ({"live-restore": "true"}, "docker_daemon.live-restore: Input should be a valid boolean; Docker's daemon.json "
         "type for live-restore is boolean (got 'true')"),
        ({"ipv6": "true"}, "docker_daemon.ipv6: Input should be a valid boolean"),
        ({"log-opts": {"max-file": 3}}, "docker_daemon.log-opts.max-file: Input should be a valid string"),
        ({"max-concurrent-downloads": "3"}, "docker_daemon.max-concurrent-downloads: Input should be a valid integer"),
        ({"registry-mirrors": "https://m.example.com"}, "docker_daemon.registry-mirrors: Input should be a valid list"),
        ({"live-restore": False}, "docker_daemon.live-restore: must stay true"),
        ({"lve-restore": True}, "docker_daemon.lve-restore: not a daemon.json key rocmfleet types; did you mean "
         "'live-restore'?"),
    ],
)  # fmt: skip
def test_wrong_daemon_keys_are_refused_with_key_and_type(lab_data, daemon, line):
    lab_data["docker_daemon"] = daemon
    with pytest.raises(ConfigError) as exc:
        host_config(lab_data)
    assert line in str(exc.value)


def test_a_key_set_by_a_setting_and_in_docker_daemon_is_refused(lab_data):
    lab_data["docker_daemon"] = {"insecure-registries": ["10.0.0.2:5000"]}
    with pytest.raises(ConfigError) as exc:
        host_config(lab_data)
    assert "docker_daemon.insecure-registries: also set by docker_insecure_registries" in str(exc.value)


def test_the_escape_hatch_refuses_typed_keys(lab_data):
    lab_data["docker_daemon_extra"] = {"ipv6": "true"}
    with pytest.raises(ConfigError) as exc:
        host_config(lab_data)
    assert "docker_daemon_extra.ipv6: is a typed daemon.json key (boolean)" in str(exc.value)


def test_key_types_read_as_docker_documents_them():
    assert docker.key_type("live-restore") == "boolean"
    assert docker.key_type("log-opts") == "object of string"
    assert docker.key_type("insecure-registries") == "array of string"
    assert docker.key_type("no-such-key") is None
    assert "live-restore" in docker.known_keys() and "default-ulimits" in docker.known_keys()


def test_settings_dump_docker_daemon_as_docker_spells_it_and_validate_again(lab_data):
    from rocmfleet.config.hostsettings import HostSettings

    lab_data["docker_daemon"] = {"log-opts": {"max-file": "5"}, "ipv6": False}
    settings = host_config(lab_data).settings
    dumped = settings.model_dump(mode="json")
    assert dumped["docker_daemon"] == {"log-opts": {"max-file": "5"}, "ipv6": False}
    assert HostSettings.model_validate(dumped).docker_daemon == settings.docker_daemon


def test_only_keys_dockerd_reloads_spare_a_restart():
    old = json.dumps({"live-restore": True, "log-driver": "json-file"})
    assert not docker.restart_needed(old, json.dumps({"live-restore": True, "log-driver": "json-file",
                                                      "insecure-registries": ["r:5000"]}))  # fmt: skip
    assert not docker.restart_needed(old, json.dumps({"live-restore": True, "log-driver": "json-file", "debug": True}))
    assert docker.restart_needed(old, json.dumps({"live-restore": True, "log-driver": "journald"}))
    assert docker.restart_needed(None, old)  # no file before: what dockerd runs with is unknown
    assert docker.restart_needed("{not json", old)
