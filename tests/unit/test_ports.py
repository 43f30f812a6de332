"""Per-instance internal ports (``VLLM_PORT`` blocks, :mod:`rocmfleet.domain.ports`): four TP-2
instances of each shipped profile that can run TP 2 on one 8-GPU MI300X host render distinct ports,
and blocks that meet an API port, each other, the metrics port or the ephemeral range are refused."""

from __future__ import annotations

import re

import pytest

from rocmfleet.config.errors import ConfigError
from rocmfleet.config.profiles import load_profiles
from rocmfleet.domain import ports, vllm, vllmfiles, vllmplace
from rocmfleet.domain.placement import PlacementError
from rocmfleet.plan.instance import HostPlacement, instance_files, vllm_settings
from tests.unit.conftest import TOPOLOGY
from tests.unit.test_partitions import _config

#: Four TP-2 instances on the host's eight GPUs (0-1, 2-3, 4-5, 6-7), API ports base_port + i.
TP2 = {"tensor_parallel_size": 2, "gpus_per_instance": 2, "instances_per_host": 4, "instance_gpus": None}
#: Shipped profiles that validation (the memory fit, heads divisible by 2) and placement accept
#: at TP 2: deepseek-r1 and deepseek-v3 need TP 4 or more (642 GiB of weights).
RUN_TP2 = {"llama-3.3-70b", "llama-4-maverick", "llama-4-scout", "qwen3-235b-a22b", "qwen3-30b-a3b"}


def _tp2_placed(tmp_path, name):
    """The profile with four TP-2 instances and its placement on the 8-GPU MI300X topology; the
    placement is None when validation or the host refuses it (the model does not fit two GPUs)."""
    tmp_path.mkdir(exist_ok=True)
    try:
        config = _config(tmp_path, name, **TP2)
        placements = vllmplace.placements(vllm_settings(config), TOPOLOGY, "mi300x-1")
    except (ConfigError, PlacementError):
        return None, None
    bdfs = {n: [TOPOLOGY.gpus[i].pci_address for i in p.gpus] for n, p in placements.items()}
    return config, HostPlacement(placements, [44, 109], bdfs)


def test_the_shipped_profiles_that_run_tp2_are_the_expected_ones(tmp_path):
    runs = {name for name in load_profiles() if _tp2_placed(tmp_path / name, name)[1] is not None}
    assert runs == RUN_TP2


@pytest.mark.parametrize("name", sorted(RUN_TP2))
def test_four_tp2_instances_render_distinct_internal_ports(tmp_path, name):
    config, placed = _tp2_placed(tmp_path, name)
    assert config is not None and placed is not None
    instances = config.instances()
    assert [len(i.gpus) for i in instances] == [2, 2, 2, 2] and config.profile.tensor_parallel_size == 2
    api, blocks = [], []
    for instance in instances:
        rendered = instance_files(config, instance, placed)
        env = dict(line.split("=", 1) for line in rendered.env.content.decode().splitlines() if "=" in line)
        unit = rendered.unit.content.decode()
        first = int(env["VLLM_PORT"])
        api.append(int(re.search(r" --port (\d+)", unit).group(1)))  # type: ignore[union-attr]
        shown = re.search(r"^# Ports: API (\d+); internal (\d+)-(\d+) ", unit, re.M)
        assert shown and (int(shown[1]), int(shown[2]), int(shown[3])) == (api[-1], first, first + ports.STRIDE - 1)
        blocks.append(range(first, first + ports.STRIDE))
    assert [b.start for b in blocks] == [20000, 20010, 20020, 20030]  # vllm_internal_port_base's default
    every = [p for b in blocks for p in b] + api
    assert len(every) == len(set(every)) == 4 * ports.STRIDE + 4  # no port twice, API or internal
    assert all(p < ports.EPHEMERAL[0] for b in blocks for p in b)


def test_the_docker_command_and_environment_carry_the_instance_ports(tmp_path):
    config, placed = _tp2_placed(tmp_path, "llama-3.3-70b")
    assert config is not None and placed is not None
    service = vllm_settings(config)
    third = config.instances()[2]
    argv = vllm.docker_run_argv(service, third, placed.placements[third.name], placed.device_gids)
    assert "--network=host" in argv
    assert argv[argv.index("--port") + 1] == str(third.port) == "8002"
    assert argv[argv.index("--env-file") + 1] == vllmfiles.files_of(third).env_file
    assert vllm.container_env(service, placed.placements[third.name])["VLLM_PORT"] == "20020"
    assert not any("VLLM_PORT" in a for a in argv)  # the environment file carries it, not the command line


def test_the_base_moves_every_block(tmp_path):
    config = _config(tmp_path, "llama-3.3-70b", host={"vllm_internal_port_base": 12000}, **TP2)
    assert [i.internal_port for i in config.instances()] == [12000, 12010, 12020, 12030]


def _problems(tmp_path, host):
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, "llama-3.3-70b", host=host, **TP2)
    return [p for p in info.value.problems if p.key == "vllm_internal_port_base"]


def test_a_block_over_an_api_port_is_refused_with_every_problem(tmp_path):
    found = _problems(tmp_path, {"vllm_internal_port_base": 7985})  # blocks 7985-8024 hold 8000-8003
    messages = [p.message for p in found]
    assert len(messages) == 4 and all(p.value == "7985" for p in found)
    assert messages[0].startswith(
        "instance llama-3.3-70b-1's internal ports 7995-8004 (VLLM_PORT 7995) hold instance llama-3.3-70b-0's "
        "API port 8000"
    )
    assert "give vllm_internal_port_base another value" in messages[0]
    assert any("llama-3.3-70b-2's internal ports 8005-8014" in m for m in messages) is False
    assert sum("8001" in m or "8002" in m or "8003" in m for m in messages) == 3


def test_explicit_instances_sharing_a_block_are_refused(tmp_path):
    instances = [
        {"name": "a", "port": 8000, "gpus": [0, 1]},
        {"name": "b", "port": 20005, "gpus": [2, 3]},  # an API port inside a's block
    ]
    found = _problems(tmp_path, {"vllm_instances": instances})
    assert [p.message.split(";")[0] for p in found] == [
        "instance a's internal ports 20000-20009 (VLLM_PORT 20000) hold instance b's API port 20005"
    ]


def test_blocks_in_the_ephemeral_range_or_past_65535_are_refused(tmp_path):
    ephemeral = _problems(tmp_path, {"vllm_internal_port_base": 32750})
    assert [p.message.split(" reach")[0] for p in ephemeral] == [
        "instance llama-3.3-70b-1's internal ports 32760-32769 (VLLM_PORT 32760)",
        "instance llama-3.3-70b-2's internal ports 32770-32779 (VLLM_PORT 32770)",
        "instance llama-3.3-70b-3's internal ports 32780-32789 (VLLM_PORT 32780)",
    ]
    assert "net.ipv4.ip_local_port_range" in ephemeral[0].message
    high = _problems(tmp_path, {"vllm_internal_port_base": 65510})
    assert [p.message.split(";")[0] for p in high] == [
        "instance llama-3.3-70b-2's internal ports 65530-65539 (VLLM_PORT 65530) are not all in 1024-65535",
        "instance llama-3.3-70b-3's internal ports 65540-65549 (VLLM_PORT 65540) are not all in 1024-65535",
    ]
    assert [p.value for p in high] == ["65510", "65510"]
    below = ConfigError  # the field's own bound: ge=1024
    with pytest.raises(below) as info:
        _config(tmp_path, "llama-3.3-70b", host={"vllm_internal_port_base": 80}, **TP2)
    assert [p.key for p in info.value.problems] == ["vllm_internal_port_base"]


def test_docker_metrics_in_a_block_is_refused(tmp_path):
    found = _problems(tmp_path, {"docker_daemon": {"metrics-addr": "127.0.0.1:20013"}})
    assert [p.message.split(";")[0] for p in found] == [
        "instance llama-3.3-70b-1's internal ports 20010-20019 (VLLM_PORT 20010) hold port 20013 of Docker's "
        "metrics-addr (docker_daemon)"
    ]


@pytest.mark.parametrize("where", ["vllm_env", "extra_env"])
def test_vllm_port_set_by_hand_is_refused(tmp_path, where):
    setting = {where: {"VLLM_PORT": "30000"}}
    host, profile = (setting, {}) if where == "vllm_env" else ({}, setting)
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, "llama-3.3-70b", host=host, **TP2, **profile)
    text = str(info.value)
    assert "VLLM_PORT" in text and "set vllm_internal_port_base instead" in text


def test_problems_of_overlapping_blocks_name_both_instances():
    class Ported:
        def __init__(self, name, port, internal_port):
            self.name, self.port, self.internal_port = name, port, internal_port

    found = ports.problems([Ported("a", 8000, 20000), Ported("b", 8001, 20005)])
    assert found == ["instances a and b share internal ports: 20000-20009 and 20005-20014"]
    assert ports.problems([Ported("a", 8000, 20000), Ported("b", 8001, 20010)]) == []
