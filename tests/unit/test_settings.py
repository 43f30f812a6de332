from __future__ import annotations

import pytest

from rocmfleet.config.instances import Instance
from rocmfleet.config.settings import ConfigError, host_config
from tests.unit.conftest import DIGEST


def test_lab_data_validates_and_resolves_image_and_instances(lab_config):
    assert lab_config.image.reference == f"10.213.0.1:5000/rocmfleet-lab/vllm-cpu:0.32.0-lab.1@{DIGEST}"
    assert lab_config.instances() == [
        Instance("tiny-llama-a", 8000, (0,), 20000),
        Instance("tiny-llama-b", 8001, (1,), 20010),
    ]


def test_without_explicit_instances_the_profile_layout_applies(lab_data):
    del lab_data["vllm_instances"]
    assert host_config(lab_data).instances() == [Instance("lab-tiny-llama-0", 8000, (0,), 20000)]


def test_every_problem_is_reported_at_once(lab_data):
    lab_data.update(vllm_image_digest="latest", vllm_shm_size_gib=0, docker_source="snap")
    with pytest.raises(ConfigError) as err:
        host_config(lab_data)
    problems = {p.key: (p.message, p.value) for p in err.value.problems}
    assert problems == {
        "vllm_image_digest": (
            "not an image digest: sha256: and 64 lower-case hex digits (skopeo inspect docker://IMAGE:TAG)",
            "'latest'",
        ),
        "vllm_shm_size_gib": ("Input should be greater than or equal to 1", "0"),
        "docker_source": ("Input should be 'docker' or 'debian'", "'snap'"),
    }


def test_unknown_key_gets_a_did_you_mean(lab_data):
    lab_data["vllm_image_tagg"] = "x"
    with pytest.raises(ConfigError) as err:
        host_config(lab_data)
    assert [str(p) for p in err.value.problems] == ["vllm_image_tagg: unknown key; did you mean 'vllm_image_tag'?"]


def test_secret_env_must_come_from_vault(lab_data):
    lab_data["vllm_secret_env"] = {"HF_TOKEN": "hf_plaintext"}
    with pytest.raises(ConfigError) as err:
        host_config(lab_data)
    assert "must be an ansible-vault value" in str(err.value)
    assert "hf_plaintext" not in str(err.value)


def test_explicit_instances_replace_the_profile_layout(lab_data):
    lab_data["vllm_instances"] = [{"name": "a", "port": 9000, "gpus": [6]}]
    assert host_config(lab_data).instances() == [Instance("a", 9000, (6,), 20000)]


def test_host_and_ports_of_pyinfra_are_checked_too(lab_data):
    lab_data["ssh_port"] = "2222"
    with pytest.raises(ConfigError, match="ssh_port: Input should be a valid integer"):
        host_config(lab_data)


def test_a_newline_in_an_environment_value_is_refused(lab_data):
    # it would add lines (other variables) to the env file, e.g. override the placement's devices
    from rocmfleet.config.errors import ConfigError
    from rocmfleet.config.settings import host_config

    with pytest.raises(ConfigError, match="values of ZZ hold a newline or another control character"):
        host_config({**lab_data, "vllm_env": {"ZZ": "x\nCUDA_VISIBLE_DEVICES=0,1"}})


def test_the_exporters_port_on_dockers_metrics_addr_is_refused(lab_data):
    # both listen: dockerd on metrics-addr, AMD's exporter on ServerPort; the second to start dies
    lab_data["docker_daemon"] = {"metrics-addr": "127.0.0.1:5000"}  # the exporter's default port
    with pytest.raises(ConfigError) as err:
        host_config(lab_data)
    assert [(p.key, p.message, p.value) for p in err.value.problems] == [
        (
            "metrics_exporter_port",
            "port 5000 is also Docker's metrics-addr (docker_daemon): one of them cannot start; give one another "
            "port, or set metrics_exporter: false",
            "5000",
        )
    ]
    lab_data["metrics_exporter"] = False
    host_config(lab_data)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://prom:9090/?x=1", "must not hold a query or fragment"),  # /api/v1/query went after the query
        ("http://prom:9090#top", "must not hold a query or fragment"),
        ("http://prom:99999", "not a URL (Port out of range 0-65535)"),
        ("http://:9090", "names no host"),
        ("http://u:secret@prom:9090", "holds credentials (user:password@)"),
        ("ftp://prom", "scheme 'ftp' is not http or https"),
    ],
)
def test_a_prometheus_url_the_soak_cannot_ask_is_refused(lab_data, url, said):
    lab_data["metrics_prometheus_url"] = url
    with pytest.raises(ConfigError) as err:
        host_config(lab_data)
    (problem,) = err.value.problems
    assert problem.key == "metrics_prometheus_url" and said in problem.message
    assert "secret" not in str(problem)


def test_a_prometheus_url_with_a_path_prefix_is_kept(lab_data):
    lab_data["metrics_prometheus_url"] = "https://mon.example.com/prometheus/"
    assert host_config(lab_data).metrics.metrics_prometheus_url == "https://mon.example.com/prometheus/"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("prometheus/rocmfleet.json", "must be an absolute path (or start with ~/): a relative one would be written"),
        ("./rocmfleet.json", "wherever pyinfra runs"),
        ("/etc/prometheus/file_sd/rocmfleet.yml", "must end in .json: the deploy writes JSON, and Prometheus's file_sd "
         "reads only files ending in .json, .yml or .yaml"),
        ("/etc/prometheus/file_sd/rocmfleet", "must end in .json"),
    ],
)  # fmt: skip
def test_metrics_targets_file_is_an_absolute_json_path(lab_data, value, said):
    with pytest.raises(ConfigError) as err:
        host_config({**lab_data, "metrics_targets_file": value})
    assert "metrics_targets_file" in str(err.value) and said in str(err.value)


@pytest.mark.parametrize("value", ["/etc/prometheus/file_sd/rocmfleet.json", "~/prometheus/rocmfleet.json"])
def test_metrics_targets_file_absolute_or_under_home_is_accepted(lab_data, value):
    assert host_config({**lab_data, "metrics_targets_file": value}).metrics.metrics_targets_file == value


@pytest.mark.parametrize("ssh_port", [None, 2222])
def test_an_instance_on_the_hosts_ssh_port_is_refused(lab_data, ssh_port):
    # --network=host: the instance would not bind sshd's port, or would take SSH from the host
    port = ssh_port or 22
    if ssh_port:
        lab_data["ssh_port"] = ssh_port
    lab_data["vllm_instances"] = [{"name": "a", "port": 8000, "gpus": [0]}, {"name": "b", "port": port, "gpus": [1]}]
    with pytest.raises(ConfigError) as err:
        host_config(lab_data)
    assert [(p.key, p.value) for p in err.value.problems] == [("vllm_instances", repr(port))]
    assert f"port {port} of instance b is the host's SSH port (ssh_port {port})" in err.value.problems[0].message
    lab_data["vllm_instances"][1]["port"] = 8001
    host_config(lab_data)
