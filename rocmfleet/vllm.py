"""The vLLM service: container command line, environment file and readiness probe.

Docker flags follow AMD's and vLLM's ROCm documentation (``../shared/reference/mi300x.md``
§3.1): ``--device /dev/kfd`` and the DRI render nodes, ``--ipc=host``, ``--group-add`` for
the groups owning those device files, ``--security-opt seccomp=unconfined``,
``--cap-add=SYS_PTRACE`` and a large ``--shm-size``. The official image's entrypoint is
``vllm serve`` (vllm-project/vllm ``docker/Dockerfile.rocm``), so arguments after the image
are ``vllm serve`` arguments.
"""

from __future__ import annotations

from rocmfleet.config import DeploySettings, VllmInstance

#: Where the deploy keeps per-instance files on the host.
CONFIG_DIR = "/etc/rocmfleet/vllm"
#: AMD's device files an instance needs (issue 5 narrows /dev/dri to the instance's nodes).
GPU_DEVICES = ("/dev/kfd", "/dev/dri")


def unit_name(instance: VllmInstance) -> str:
    """``vllm-<name>.service``."""
    return f"vllm-{instance.name}.service"


def container_name(instance: VllmInstance) -> str:
    """``vllm-<name>``: one container per instance, replaced on every start."""
    return f"vllm-{instance.name}"


def env_file_path(instance: VllmInstance) -> str:
    """Host path of the instance's container environment file (mode 0600)."""
    return f"{CONFIG_DIR}/{instance.name}.env"


def serve_args(settings: DeploySettings, instance: VllmInstance) -> list[str]:
    """``vllm serve`` arguments for ``instance``: model, name, port, then ``vllm_args`` sorted.

    ``vllm_args`` values: ``True`` gives a bare flag, ``False`` leaves it out, anything else is
    passed as the flag's value.
    """
    args = [
        settings.vllm_model,
        "--served-model-name",
        settings.vllm_served_model_name,
        "--host",
        "0.0.0.0",
        "--port",
        str(instance.port),
    ]
    for flag, value in sorted(settings.vllm_args.items()):
        if value is False:
            continue
        args.append(f"--{flag}")
        if value is not True:
            args.append(str(value))
    return args


def docker_run_argv(settings: DeploySettings, instance: VllmInstance, device_gids: list[int]) -> list[str]:
    """The full ``docker run`` command of ``instance``'s unit.

    Args:
        settings: validated host data.
        instance: the instance to run.
        device_gids: numeric group ids owning the GPU device files on the host (read by the
            ``DeviceGroupIds`` fact); numeric because the image's ``/etc/group`` may lack
            ``render`` or give it another id.

    Returns:
        argv, starting with ``/usr/bin/docker run``; the image is pinned by digest.
    """
    argv = [
        "/usr/bin/docker",
        "run",
        "--rm",
        "--name",
        container_name(instance),
        "--network=host",
        "--ipc=host",
        "--shm-size",
        f"{settings.vllm_shm_size_gib}g",
        "--security-opt",
        "seccomp=unconfined",
        "--cap-add=SYS_PTRACE",
    ]
    for device in GPU_DEVICES:
        argv += ["--device", device]
    for gid in sorted(set(device_gids)):
        argv += ["--group-add", str(gid)]
    argv += [
        "--env-file",
        env_file_path(instance),
        "--volume",
        f"{settings.vllm_cache_dir}:/root/.cache/vllm",
        "--volume",
        f"{settings.vllm_hf_cache_dir}:/root/.cache/huggingface",
        "--label",
        f"org.rocmfleet.instance={instance.name}",
        "--label",
        f"org.rocmfleet.image-tag={settings.vllm_image_tag}",
        settings.image_reference,
    ]
    return argv + serve_args(settings, instance)


def env_file(settings: DeploySettings) -> str:
    """Contents of the container environment file: ``NAME=value`` lines, sorted."""
    return "".join(f"{name}={value}\n" for name, value in sorted(settings.vllm_env.items()))
