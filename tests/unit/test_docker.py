from __future__ import annotations

import json

from rocmfleet.docker import daemon_json
from rocmfleet.settings import host_config


def test_daemon_json_merges_defaults_overrides_and_registries(lab_data):
    lab_data["docker_daemon"] = {"log-opts": {"max-size": "10m"}, "data-root": "/srv/docker"}
    lab_data["docker_insecure_registries"] = ["b:5000", "a:5000", "b:5000"]
    text = daemon_json(host_config(lab_data).settings)
    assert text.endswith("}\n")
    data = json.loads(text)
    assert data["live-restore"] is True
    assert data["log-opts"] == {"max-size": "10m"}
    assert data["data-root"] == "/srv/docker"
    assert data["insecure-registries"] == ["a:5000", "b:5000"]


def test_daemon_json_is_stable(lab_data):
    one = daemon_json(host_config(lab_data).settings)
    assert one == daemon_json(host_config(dict(reversed(lab_data.items()))).settings)
