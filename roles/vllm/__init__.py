"""vLLM role: image by digest, per-instance files and systemd unit, placement, readiness."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import docker, files, systemd
from pyinfra.operations.util import any_changed

from rocmfleet import systemd as unit_syntax
from rocmfleet import vllm
from rocmfleet.facts.devices import DeviceGroupIds
from rocmfleet.facts.topology import GpuTopology
from rocmfleet.operations import secrets
from rocmfleet.operations import vllm as vllm_ops
from rocmfleet.placement import InstanceShape, place
from rocmfleet.settings import HostConfig
from rocmfleet.vault import Secret


def placements(config: HostConfig) -> dict:
    """Each instance's placement on this host's real GPU topology (the ``GpuTopology`` fact).

    Raises:
        RuntimeError: the host shows no KFD topology (amdgpu not loaded).
        PlacementError: the instances do not fit this host's GPUs.
    """
    topology = host.get_fact(GpuTopology)
    if topology is None:
        raise RuntimeError(f"{host.name}: no GPUs in /sys/class/kfd (is the amdgpu driver loaded?)")
    shapes = [
        InstanceShape(i.name, i.port, i.gpus, config.profile.tensor_parallel_size, config.profile.attention_heads)
        for i in config.instances()
    ]
    return {p.name: p for p in place(shapes, topology)}


@deploy("vllm")
def apply(config: HostConfig) -> None:
    """Pull the image, render each instance's files, (re)start what changed, wait until ready."""
    settings = config.settings
    files.directory(name=f"Create {vllm.CONFIG_DIR}", path=vllm.CONFIG_DIR, user="root", group="root", mode="700")
    for path in (settings.vllm_cache_dir, settings.vllm_hf_cache_dir):
        files.directory(name=f"Create {path}", path=path, mode="755")
    image = docker.image(name="Pull the vLLM image by digest", image=config.image.reference)
    gids = host.get_fact(DeviceGroupIds)
    placed = placements(config)

    for instance in host.loop(config.instances()):
        names = vllm.files_of(instance)
        placement = placed[instance.name]
        env = files.template(
            name=f"Render {names.env_file}",
            src="templates/vllm/vllm.env.j2",
            dest=names.env_file,
            user="root",
            group="root",
            mode="600",
            instance=instance.name,
            env_lines=vllm.env_lines(vllm.container_env(config, placement)).rstrip("\n"),
        )
        secret_values = {name: secret.reveal() for name, secret in settings.vllm_secret_env.items()}
        secret_env = secrets.secret_file(
            name=f"Write {names.secrets_file}",
            path=names.secrets_file,
            content=Secret(vllm.env_lines(secret_values)),
        )
        unit_file = files.template(
            name=f"Render {names.unit}",
            src="templates/vllm/vllm.service.j2",
            dest=f"/etc/systemd/system/{names.unit}",
            mode="644",
            instance=instance.name,
            model=config.profile.served_model_name,
            port=instance.port,
            image=config.image.reference,
            container=names.container,
            secrets_file=names.secrets_file,
            notes=placement.notes,
            exec_start=unit_syntax.exec_line(vllm.docker_run_argv(config, instance, placement, gids)),
            timeout_start_s=settings.vllm_ready_timeout_s,
        )
        systemd.daemon_reload(name="Reload systemd units", _if=unit_file.did_change)
        started = systemd.service(name=f"Enable and start {names.unit}", service=names.unit, running=True, enabled=True)
        systemd.service(
            name=f"Restart {names.unit} for its new image, unit or environment",
            service=names.unit,
            restarted=True,
            # A unit that was just started already runs the new files.
            _if=[any_changed(env, secret_env, unit_file, image), started.did_not_change],
        )

    # Wait only after every instance was (re)started, so that they load their models together.
    for instance in host.loop(config.instances()):
        names = vllm.files_of(instance)
        vllm_ops.ready(
            name=f"Wait until {names.unit} is ready",
            port=instance.port,
            model=config.profile.served_model_name,
            container=names.container,
            timeout_s=settings.vllm_ready_timeout_s,
        )
