"""Property: a group file with a duplicate key, a YAML 1.1 scalar or an out-of-range number is never accepted."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocmfleet.config import groupvars
from rocmfleet.config.errors import ConfigError
from rocmfleet.config.settings import host_config

PROFILES = Path(__file__).resolve().parents[2] / "group_vars" / "profiles"
#: Integer keys and their bounds (the models' ge/le).
BOUNDS = {
    "vllm_shm_size_gib": (1, 1024),
    "vllm_ready_timeout_s": (10, 86400),
    "vllm_gpu_count": (1, 64),
    "rocm_reboot_parallel": (1, 1000),
    "rocm_reboot_timeout_s": (30, 7200),
    "ssh_port": (1, 65535),
}
YAML11 = ["yes", "No", "on", "OFF", "y", "n", "022", "0600", "-017", "0b101", "1_000", "1:30", "0777"]
STRING_KEYS = ["vllm_profile", "vllm_image_tag", "rocm_version", "ssh_user", "tuning_cpu_governor"]


def accepted(tmp_path: Path, text: str) -> bool:
    """Whether ``text`` as a group file gives a host configuration without any problem."""
    (tmp_path / "g.yml").write_text(text)
    groupvars.reset()
    data = groupvars.load_group_vars("g", tmp_path)
    if groupvars.problems():
        return False
    try:
        host_config(data, PROFILES)
    except ConfigError:
        return False
    return True


BASE = "vllm_profile: llama-3.3-70b\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.sampled_from([*BOUNDS, *STRING_KEYS]),
    first=st.integers(1, 100),
    second=st.integers(1, 100),
    between=st.integers(0, 3),
)
def test_a_duplicate_key_is_never_accepted(tmp_path, key, first, second, between):
    filler = "".join(f"vllm_env:\n  X{i}: 'v'\n" if i == 0 else "" for i in range(between))
    text = BASE + f"{key}: {first}\n" + filler + f"{key}: {second}\n"
    assert not accepted(tmp_path, text)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.sampled_from([*BOUNDS, *STRING_KEYS, "rocm_userspace", "tuning_iommu_pt"]), scalar=st.sampled_from(YAML11)
)
def test_a_yaml11_scalar_is_never_accepted(tmp_path, key, scalar):
    assert not accepted(tmp_path, BASE + f"{key}: {scalar}\n")
    assert not accepted(tmp_path, BASE + f"vllm_env:\n  X: {scalar}\n")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(sorted(BOUNDS)), data=st.data())
def test_an_out_of_range_number_is_never_accepted(tmp_path, key, data):
    low, high = BOUNDS[key]
    value = data.draw(st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1)))
    assert not accepted(tmp_path, BASE + f"{key}: {value}\n")


def test_in_range_numbers_and_quoted_scalars_are_accepted(tmp_path):
    """The properties above cannot pass by refusing everything."""
    text = BASE + "".join(f"{key}: {high}\n" for key, (_low, high) in BOUNDS.items() if key != "vllm_gpu_count")
    assert accepted(tmp_path, text + "vllm_env:\n  X: 'no'\n  Y: '022'\n")
