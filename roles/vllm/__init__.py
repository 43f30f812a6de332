"""vLLM role: image by digest, argument check, per-instance files and systemd unit, placement,
readiness with roll back to the last good version (the order: :mod:`rocmfleet.rollout`)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import docker, files, systemd
from pyinfra.operations.util import any_changed

from rocmfleet import rollout, vllm
from rocmfleet import systemd as unit_syntax
from rocmfleet.facts.devices import DeviceGroupIds
from rocmfleet.facts.topology import GpuTopology
from rocmfleet.operations import secrets
from rocmfleet.operations import vllm as vllm_ops
from rocmfleet.settings import HostConfig, HostSettings
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
    return vllm.placements(config, topology)


#: A restored version waits at least the default readiness deadline (``vllm_ready_timeout_s``):
#: a short deadline set to fail a new version fast must not cut short the wait for the old one.
ROLLBACK_MIN_TIMEOUT_S = HostSettings.model_fields["vllm_ready_timeout_s"].default


def unit_path(instance_files: vllm.InstanceFiles) -> str:
    """``/etc/systemd/system/vllm-<instance>.service``."""
    return f"/etc/systemd/system/{instance_files.unit}"


def last_good_of(instance_name: str, instance_files: vllm.InstanceFiles) -> rollout.LastGoodFiles:
    """The instance's live files and its ``<instance>.last-good`` directory under ``vllm.CONFIG_DIR``."""
    return rollout.last_good_files(
        vllm.CONFIG_DIR, instance_name, unit_path(instance_files), instance_files.env_file, instance_files.secrets_file
    )


@deploy("vllm")
def apply(config: HostConfig) -> None:
    """Pull the image, check the new arguments with it, render each instance's files, (re)start what
    changed, wait until ready, roll back what is not, keep what is ready as the last good version."""
    settings = config.settings
    files.directory(name=f"Create {vllm.CONFIG_DIR}", path=vllm.CONFIG_DIR, user="root", group="root", mode="700")
    for path in (settings.vllm_cache_dir, settings.vllm_hf_cache_dir):
        files.directory(name=f"Create {path}", path=path, mode="755")
    # (a) The old containers keep serving while the new image is pulled.
    image = docker.image(name="Pull the vLLM image by digest", image=config.image.reference)
    gids = host.get_fact(DeviceGroupIds)
    placed = placements(config)

    # (b) Every instance's new arguments go through the new image's own parser before any file is
    # written: a rejection fails the host with all instances untouched.
    for instance in host.loop(config.instances()):
        names = vllm.files_of(instance)
        vllm_ops.serve_args_check(
            name=f"Check the vllm serve arguments of {names.unit} with the image's vLLM",
            instance=instance.name,
            image=config.image.reference,
            serve_args=vllm.serve_args(config, instance),
            env=vllm.container_env(config, placed[instance.name]),
            last_good=last_good_of(instance.name, names),
        )

    # (c) Write the files and swap what changed.
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
            dest=unit_path(names),
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

    # (d) Wait only after every instance was (re)started, so that they load their models together;
    # (e) one operation for all, so that each instance not ready by the deadline is rolled back.
    targets = []
    for instance in config.instances():
        names = vllm.files_of(instance)
        targets.append(
            rollout.WaitTarget(
                name=instance.name,
                unit=names.unit,
                container=names.container,
                port=instance.port,
                model=config.profile.served_model_name,
                image=config.image.reference,
                files=last_good_of(instance.name, names),
            )
        )
    vllm_ops.ready_or_roll_back(
        name="Wait until every vLLM instance is ready; roll back each one that is not",
        targets=targets,
        timeout_s=settings.vllm_ready_timeout_s,
        rollback_timeout_s=max(settings.vllm_ready_timeout_s, ROLLBACK_MIN_TIMEOUT_S),
    )

    # Only now, ready: these files become the version to roll back to.
    for instance in host.loop(config.instances()):
        names = vllm.files_of(instance)
        vllm_ops.last_good(
            name=f"Keep the files of {names.unit} as its last good version",
            instance=instance.name,
            port=instance.port,
            model=config.profile.served_model_name,
            files=last_good_of(instance.name, names),
            record=rollout.serve_record(
                config.image.reference,
                vllm.serve_args(config, instance),
                vllm.container_env(config, placed[instance.name]),
            ),
        )
