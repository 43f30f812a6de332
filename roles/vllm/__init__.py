"""vLLM role: image by digest, environment file, one systemd unit per instance, readiness."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import docker, files, systemd
from pyinfra.operations.util import any_changed

from rocmfleet import systemd as unit_syntax
from rocmfleet import vllm
from rocmfleet.config import DeploySettings
from rocmfleet.facts.devices import DeviceGroupIds
from rocmfleet.operations import vllm as vllm_ops


@deploy("vllm")
def apply(settings: DeploySettings) -> None:
    """Pull the image, render each instance's files, (re)start what changed, wait until ready."""
    for path in (vllm.CONFIG_DIR, settings.vllm_cache_dir, settings.vllm_hf_cache_dir):
        files.directory(name=f"Create {path}", path=path, mode="755")
    image = docker.image(name="Pull the vLLM image by digest", image=settings.image_reference)
    gids = host.get_fact(DeviceGroupIds)

    for instance in host.loop(settings.vllm_instances):
        unit = vllm.unit_name(instance)
        env = files.template(
            name=f"Render {vllm.env_file_path(instance)}",
            src="templates/vllm/vllm.env.j2",
            dest=vllm.env_file_path(instance),
            user="root",
            group="root",
            mode="600",
            instance=instance.name,
            env_lines=vllm.env_file(settings).rstrip("\n"),
        )
        unit_file = files.template(
            name=f"Render {unit}",
            src="templates/vllm/vllm.service.j2",
            dest=f"/etc/systemd/system/{unit}",
            mode="644",
            instance=instance.name,
            model=settings.vllm_served_model_name,
            port=instance.port,
            image=settings.image_reference,
            container=vllm.container_name(instance),
            exec_start=unit_syntax.exec_line(vllm.docker_run_argv(settings, instance, gids)),
            timeout_start_s=settings.vllm_ready_timeout_s,
        )
        systemd.daemon_reload(name="Reload systemd units", _if=unit_file.did_change)
        started = systemd.service(name=f"Enable and start {unit}", service=unit, running=True, enabled=True)
        systemd.service(
            name=f"Restart {unit} for its new image, unit or environment",
            service=unit,
            restarted=True,
            # A unit that was just started already runs the new files.
            _if=[any_changed(env, unit_file, image), started.did_not_change],
        )
        vllm_ops.ready(
            name=f"Wait until {unit} is ready",
            port=instance.port,
            model=settings.vllm_served_model_name,
            container=vllm.container_name(instance),
            timeout_s=settings.vllm_ready_timeout_s,
        )
