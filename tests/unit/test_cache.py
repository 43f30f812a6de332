"""Issue 15: the cache key, per-instance or baked cache directories, the bake's pure parts, warm-up."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmfleet import scripts
from rocmfleet.config.settings import host_config
from rocmfleet.domain import cachedirs, cachekey, readiness, vllm, warmup
from rocmfleet.domain.cachekey import CacheKey, ImageFacts
from rocmfleet.fleet.cache import cachebake
from rocmfleet.plan.instance import vllm_settings

from .conftest import DIGEST, LAB_PROFILE

FACTS = ImageFacts(base_digest=DIGEST, rocm_version="7.0.0-38", vllm_version="0.32.0")


def _key(data, arch="gfx942", facts=FACTS) -> CacheKey:
    return cachekey.instance_key(host_config(data), arch, facts)


# --- the key ------------------------------------------------------------------------------------

#: (where, key, value): one change of each input the key covers, and the field it must name.
KEY_INPUTS = [
    ("arch", None, "gfx90a", "gpu_arch"),
    ("facts", "base_digest", "sha256:" + "cd" * 32, "base_digest"),
    ("facts", "rocm_version", "6.4.1", "rocm_version"),
    ("facts", "vllm_version", "0.33.0", "vllm_version"),
    ("profile", "model", "lab/other", "model"),
    ("profile", "tensor_parallel_size", 2, "tensor_parallel_size"),
    ("profile", "max_num_batched_tokens", 4096, "max_num_batched_tokens"),
    ("profile", "max_model_len", 1024, "max_model_len"),
    ("profile", "max_num_seqs", 64, "max_num_seqs"),
    ("profile", "dtype", "float16", "dtype"),
    ("profile", "kv_cache_dtype", "fp8", "kv_cache_dtype"),
    ("profile", "cudagraph_mode", "PIECEWISE", "cudagraph_mode"),
    ("profile", "aiter", True, "aiter"),
    ("profile", "block_size", 32, "block_size"),
    ("profile", "extra_args", ["--enforce-eager"], "extra_args"),
    ("host", "vllm_env", {"VLLM_CPU_KVCACHE_SPACE": "1", "TORCHINDUCTOR_MAX_AUTOTUNE": "1"}, "env"),
]
#: Inputs that change no compiled code: the key stays the same.
NOT_KEY_INPUTS = [
    ("profile", "gpu_memory_utilization", 0.5),
    ("profile", "served_model_name", "another-name"),
    ("profile", "base_port", 9000),
    ("profile", "disable_log_requests", True),
    ("profile", "warmup_at_start", True),
    ("host", "vllm_shm_size_gib", 4),
    ("host", "vllm_cache_dir", "/srv/cache"),
    ("host", "vllm_instances", [{"name": "x", "port": 8005, "gpus": [3]}]),
]


def _changed(tmp_path, lab_data, where, name, value):
    """Host data (and a profiles directory) with one input changed."""
    import yaml

    profile = yaml.safe_load(LAB_PROFILE.read_text())
    data = dict(lab_data)
    if where == "profile":
        if name == "tensor_parallel_size":
            profile.update(gpus_per_instance=2, attention_heads=2)
            data["vllm_instances"] = [{"name": "tiny-llama-a", "port": 8000, "gpus": [0, 1]}]
        profile[name] = value
    elif where == "host":
        data[name] = value
    (tmp_path / "lab-tiny-llama.yml").write_text(yaml.safe_dump(profile))
    return host_config(data, tmp_path)


@pytest.mark.parametrize(
    ("where", "name", "value", "field"), KEY_INPUTS, ids=[i[3] + ":" + str(i[1]) for i in KEY_INPUTS]
)
def test_key_changes_with_each_input_and_names_it(tmp_path, lab_data, where, name, value, field):
    base = cachekey.instance_key(_changed(tmp_path, lab_data, "none", None, None), "gfx942", FACTS)
    arch, facts = "gfx942", FACTS
    if where == "arch":
        arch = value
    elif where == "facts":
        facts = FACTS.model_copy(update={name: value})
    config = _changed(tmp_path, lab_data, where, name, value)
    other = cachekey.instance_key(config, arch, facts)
    assert other.digest != base.digest and other.short != base.short
    named = [d[0].split(".")[0] for d in cachekey.differences(base, other)]
    assert field in named


@pytest.mark.parametrize(("where", "name", "value"), NOT_KEY_INPUTS, ids=[i[1] for i in NOT_KEY_INPUTS])
def test_key_ignores_what_compiles_nothing(tmp_path, lab_data, where, name, value):
    base = cachekey.instance_key(_changed(tmp_path, lab_data, "none", None, None), "gfx942", FACTS)
    assert cachekey.instance_key(_changed(tmp_path, lab_data, where, name, value), "gfx942", FACTS) == base


def test_key_is_stable_and_canonical(lab_data):
    a, b = _key(lab_data), _key(dict(lab_data))
    assert a.digest == b.digest and len(a.digest) == 64
    assert json.loads(a.canonical())["key_version"] == cachekey.KEY_VERSION
    assert CacheKey.model_validate_json(a.canonical()) == a


def test_key_leaves_out_visible_devices_and_cache_paths(lab_data):
    env = _key(lab_data).env
    assert not set(env) & cachekey.ENV_EXCLUDED
    # the profile's extra_env counts
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_USE_AOT_COMPILE": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def test_key_names_the_profiles_model_revision(tmp_path, lab_data):
    def key(revision):
        config = _changed(tmp_path, lab_data, "none", None, None)
        profile = config.profile.model_copy(update={"model": "org/tiny-llama", "revision": revision})
        return cachekey.instance_key(dataclasses.replace(config, profile=profile), "gfx942", FACTS)

    a, b = key("a" * 40), key("b" * 40)
    assert a.model_revision == "a" * 40
    assert [d[0] for d in cachekey.differences(a, b)] == ["model_revision"]


# --- refusing a baked image ---------------------------------------------------------------------


def _baked(lab_data, key: CacheKey, **labels_over):
    data = dict(lab_data, vllm_image_tag=cachedirs.baked_tag("0.32.0-lab.1", key.short))
    config = host_config(data)
    labels = {cachekey.LABEL_KEY: key.canonical(), cachekey.LABEL_HASH: key.digest, **labels_over}
    return config, labels


def test_matching_baked_image_is_accepted(lab_data):
    key = _key(lab_data)
    config, labels = _baked(lab_data, key)
    assert cachekey.refusal(config.image.reference, labels, config, "gfx942") == []


def test_baked_image_of_other_architecture_is_refused_naming_the_field(lab_data):
    key = _key(lab_data, arch="gfx90a")
    config, labels = _baked(lab_data, key)
    problems = cachekey.refusal(config.image.reference, labels, config, "gfx942")
    assert len(problems) == 1 and "field gpu_arch is 'gfx90a' in the image, 'gfx942'" in problems[0]


def test_baked_image_of_other_tp_is_refused_naming_the_field(tmp_path, lab_data):
    key = _key(lab_data)  # baked at TP 1
    config = _changed(tmp_path, lab_data, "profile", "tensor_parallel_size", 2)
    data = dict(lab_data, vllm_image_tag=cachedirs.baked_tag("0.32.0-lab.1", key.short))
    data["vllm_instances"] = [{"name": "tiny-llama-a", "port": 8000, "gpus": [0, 1]}]
    config = host_config(data, tmp_path)
    labels = {cachekey.LABEL_KEY: key.canonical()}
    problems = cachekey.refusal(config.image.reference, labels, config, "gfx942")
    assert any("field tensor_parallel_size is 1 in the image, 2 for this instance" in p for p in problems)


def test_baked_image_of_other_vllm_is_refused(lab_data):
    key = _key(lab_data, facts=FACTS.model_copy(update={"vllm_version": "0.31.0"}))
    config, labels = _baked(lab_data, key)
    assert any("field vllm_version" in p for p in cachekey.refusal(config.image.reference, labels, config, "gfx942"))


def test_baked_tag_without_label_or_with_edited_label_is_refused(lab_data):
    key = _key(lab_data)
    config, _ = _baked(lab_data, key)
    assert "no org.rocmfleet.cache-key label" in cachekey.refusal(config.image.reference, {}, config, "gfx942")[0]
    edited = {cachekey.LABEL_KEY: key.canonical(), cachekey.LABEL_HASH: "0" * 64}
    assert "does not match" in cachekey.refusal(config.image.reference, edited, config, "gfx942")[0]
    other = _key(lab_data, arch="gfx90a")
    wrong_tag = {cachekey.LABEL_KEY: other.canonical()}
    assert any("its tag names key" in p for p in cachekey.refusal(config.image.reference, wrong_tag, config, "gfx942"))


def test_base_image_is_never_refused(lab_config):
    assert cachekey.refusal(lab_config.image.reference, None, lab_config, "gfx942") == []


def test_the_checks_refusal_from_the_plan_is_the_deploys(lab_data):
    """``cache::baked_image_matches_instances`` compares the image's label with the plan's key (its
    ``checks.cache_key``: the check process has no configuration) and says what the deploy's rule
    (:func:`rocmfleet.domain.cachekey.refusal`) says, word for word; GPUs other than the plan's are
    an error, never a pass."""
    from rocmfleet.domain.tooloutput import CannotCheck
    from rocmfleet.fleet.check import test_cache as check
    from rocmfleet.plan.build import plan_host

    key = _key(lab_data)
    config, labels = _baked(lab_data, key)
    checks = plan_host("h", config).checks  # the default facts: 8x MI300X, gfx942
    assert checks is not None and checks.baked and checks.cache_arch == "gfx942"
    other = _key(lab_data, arch="gfx90a")
    cases = [
        labels,
        {},
        None,
        {cachekey.LABEL_KEY: key.canonical(), cachekey.LABEL_HASH: "0" * 64},
        {cachekey.LABEL_KEY: other.canonical()},
        {cachekey.LABEL_KEY: _key(lab_data, facts=FACTS.model_copy(update={"vllm_version": "0.31.0"})).canonical()},
    ]
    for case in cases:
        assert check.refusal(checks, case, "gfx942") == cachekey.refusal(config.image.reference, case, config, "gfx942")
    assert any("field gpu_arch" in p for p in check.refusal(checks, {cachekey.LABEL_KEY: other.canonical()}, "gfx942"))
    with pytest.raises(CannotCheck, match="the plan's cache key is for GPUs gfx942, the host has gfx90a"):
        check.refusal(checks, labels, "gfx90a")
    unbaked = plan_host("h", host_config(lab_data)).checks
    assert unbaked is not None and not unbaked.baked and unbaked.cache_key is None


# --- cache directories --------------------------------------------------------------------------


def test_instances_get_their_own_writable_cache_dirs(lab_config, lab_placements):
    argv = {
        i.name: vllm.docker_run_argv(vllm_settings(lab_config), i, lab_placements[i.name], [])
        for i in lab_config.instances()
    }
    a = [argv["tiny-llama-a"][i + 1] for i, x in enumerate(argv["tiny-llama-a"]) if x == "--volume"]
    assert "/var/cache/vllm/tiny-llama-a/abababababab/triton:/root/.triton/cache" in a
    assert "/var/cache/vllm/tiny-llama-a/abababababab/aiter:/root/.aiter/jit" in a
    assert not any(v.startswith("/var/cache/vllm:") for v in a)
    assert cachedirs.writable_sharing(lab_config) == []


OTHER_DIGEST = "sha256:" + "cd" * 32


def _caches(config, placements) -> dict[str, dict[str, str]]:
    """``{instance: {cache name: host directory}}`` as the ``docker run`` line mounts them."""
    by_path = {d.path: d.name for d in cachedirs.LAYOUT}
    found: dict[str, dict[str, str]] = {}
    for i in config.instances():
        argv = vllm.docker_run_argv(vllm_settings(config), i, placements[i.name], [])
        volumes = [argv[k + 1].split(":") for k, x in enumerate(argv) if x == "--volume"]
        found[i.name] = {by_path[container]: host for host, container, *_ in volumes if container in by_path}
    return found


def test_two_images_give_disjoint_cache_directories_for_every_compiler(lab_data, lab_placements):
    """Issue 27: a Triton cache of another Triton or ROCm build gives garbled output (vllm issue
    41871), so no compiler's directory of one image is, or holds, another image's."""
    first = host_config(lab_data)
    second = host_config(dict(lab_data, vllm_image_tag="0.33.0", vllm_image_digest=OTHER_DIGEST))
    one, two = _caches(first, lab_placements), _caches(second, lab_placements)
    for instance in one:
        assert set(one[instance]) == set(two[instance]) == {"vllm", "inductor", "triton", "aiter"}
        for name, path in one[instance].items():
            assert path == f"/var/cache/vllm/{instance}/abababababab/{name}"
            assert two[instance][name] == f"/var/cache/vllm/{instance}/cdcdcdcdcdcd/{name}"
        paths = [p.rstrip("/") + "/" for p in (*one[instance].values(), *two[instance].values())]
        assert not [(a, b) for a in paths for b in paths if a != b and a.startswith(b)]
    for config in (first, second):
        for i in config.instances():
            assert cachedirs.aiter_seed_dir(config, i) == _caches(config, lab_placements)[i.name]["aiter"]
    # the same image under another tag is the same build: the same namespace
    retagged = host_config(dict(lab_data, vllm_image_tag="0.32.0-lab.1-again"))
    assert _caches(retagged, lab_placements) == one


def test_the_namespace_is_the_digest_short_form_and_refuses_other_digests(lab_config):
    assert cachedirs.namespace(lab_config) == "abababababab"
    instance = lab_config.instances()[0]
    assert cachedirs.prepared(lab_config, instance) == ("/var/cache/vllm/tiny-llama-a", "abababababab")

    class Odd:
        tag, digest = "t", "sha512:" + "ab" * 64

    class Host:
        image = Odd()

    with pytest.raises(ValueError, match="sha256: and 64 lowercase hex"):
        cachedirs.namespace(Host())  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(names=st.lists(st.from_regex(r"[a-z0-9][a-z0-9.-]{0,10}", fullmatch=True), min_size=2, max_size=8, unique=True))
def test_two_instances_never_share_a_writable_cache(names):
    from .conftest import DIGEST as digest

    data = {
        "vllm_profile": "lab-tiny-llama",
        "vllm_image_tag": "0.32.0-lab.1",
        "vllm_image_digest": digest,
        "vllm_instances": [{"name": n, "port": 8000 + i, "gpus": [i]} for i, n in enumerate(names)],
    }
    config = host_config(data)
    assert cachedirs.writable_sharing(config) == []
    hosts = [m.host for i in config.instances() for m in cachedirs.mounts(config, i) if not m.read_only]
    assert len(hosts) == len(set(hosts)) == len(names) * len(cachedirs.LAYOUT)


def test_sharing_is_detected(lab_config, monkeypatch):
    """The check itself can fail: two instances mounting one directory, or one inside another's."""
    monkeypatch.setattr(cachedirs, "mounts", lambda config, i: [cachedirs.Mount(f"/c/{i.name[:-2]}", "/x")])
    assert cachedirs.writable_sharing(lab_config) == [
        "instances tiny-llama-a and tiny-llama-b share writable cache /c/tiny-llama"
    ]
    assert cachedirs.Mount("/a", "/x").arg() == "/a:/x" and cachedirs.Mount("/a", "/x", True).arg() == "/a:/x:ro"


def test_baked_image_mounts_no_cache_and_env_points_at_the_layer(lab_data, lab_placements):
    config, _ = _baked(lab_data, _key(lab_data))
    instance = config.instances()[0]
    argv = vllm.docker_run_argv(vllm_settings(config), instance, lab_placements[instance.name], [])
    volumes = [argv[i + 1] for i, x in enumerate(argv) if x == "--volume"]
    assert volumes == ["/var/cache/huggingface:/root/.cache/huggingface:ro"]
    assert cachedirs.mounts(config, instance) == [] and cachedirs.writable_sharing(config) == []
    assert cachedirs.prepared(config, instance) is None and cachedirs.aiter_seed_dir(config, instance) is None
    env = vllm.container_env(vllm_settings(config), lab_placements[instance.name])
    assert env["TRITON_CACHE_DIR"] == "/root/.triton/cache" and env["AITER_JIT_DIR"] == "/root/.aiter/jit"


def test_baked_tag_derivation():
    assert cachedirs.baked_tag("v0.33.0", "0123456789ab") == "v0.33.0-rfcache-0123456789ab"
    assert cachedirs.baked_tag("v0.33.0-rfcache-0123456789ab", "ba9876543210") == "v0.33.0-rfcache-ba9876543210"
    long = cachedirs.baked_tag("x" * 128, "0123456789ab")
    assert len(long) == 128 and cachedirs.baked_key_of(long) == "0123456789ab"
    assert cachedirs.baked_key_of("v0.33.0") is None
    with pytest.raises(ValueError, match="12 lowercase hex"):
        cachedirs.baked_tag("v1", "XYZ")


# --- the bake's pure parts ----------------------------------------------------------------------

LISTING = (
    "100\taiter/build/module_rmsnorm.so\n"
    "10\tinductor/fxgraph/ab/entry\n"
    "7\ttriton/XYZ/kernel.hsaco\n"
    "5\tvllm/modelinfos/llama.json\n"
    "20\tvllm/torch_compile_cache/1a2b3c4d5e/rank_0_0/backbone/inductor_cache/x.py\n"
    "30\tvllm/torch_compile_cache/1a2b3c4d5e/rank_0_0/backbone/triton_cache/k.json\n"
    "40\tvllm/torch_compile_cache/1a2b3c4d5e/rank_0_0/backbone/computation_graph.py\n"
    "50\tvllm/torch_compile_cache/torch_aot_compile/h/model\n"
    "checksum\t" + "e" * 64 + "\n"
)


def test_manifest_counts_sizes_and_writers():
    m = cachebake.manifest(LISTING, "f" * 64)
    assert (m.files, m.bytes, m.checksum, m.layer_sha256) == (8, 262, "e" * 64, "f" * 64)
    assert m.caches["vllm"].files == 5 and m.caches["vllm"].bytes == 145 and m.caches["aiter"].bytes == 100
    assert m.writers["AITER JIT"].files == 1
    assert m.writers["Triton"].bytes == 7
    assert m.writers["TorchInductor (in vLLM's cache)"].bytes == 20
    assert m.writers["Triton (in vLLM's cache)"].bytes == 30
    assert m.writers["vLLM torch.compile"].bytes == 40
    assert m.writers["vLLM AOT compile"].bytes == 50
    assert m.writers["vLLM (other)"].bytes == 5


def test_manifest_refuses_bad_listings():
    with pytest.raises(ValueError, match="no 'checksum' line"):
        cachebake.manifest("1\tvllm/x\n")
    with pytest.raises(ValueError, match="line 1"):
        cachebake.manifest("oops\n")


def test_dockerfile_pins_base_by_digest_adds_layer_and_labels(lab_data):
    key = _key(lab_data)
    base = host_config(lab_data).image
    m = cachebake.manifest(LISTING)
    text = cachebake.dockerfile(base, key, m)
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0] == f"FROM {base.repository}@{DIGEST}"
    assert lines[1] == "ADD cache-layer.tar /"
    assert "ENV TRITON_CACHE_DIR=/root/.triton/cache" in lines
    label = next(line for line in lines if line.startswith(f"LABEL {cachekey.LABEL_KEY}="))
    quoted = label.split("=", 1)[1]
    # Docker's double-quote rules: \" -> ", \\ -> \, \$ -> $
    value = quoted[1:-1].replace('\\"', '"').replace("\\$", "$").replace("\\\\", "\\")
    assert CacheKey.model_validate_json(value) == key
    assert f'LABEL {cachekey.LABEL_HASH}="{key.digest}"' in lines


def test_docker_quote_escapes_variables():
    assert cachebake._docker_quote('a"$b\\') == '"a\\"\\$b\\\\"'


def test_baked_reference_and_image_facts(lab_data):
    base = host_config(lab_data).image
    key = _key(lab_data)
    assert cachebake.baked_image_ref(base, key) == f"{base.repository}:0.32.0-lab.1-rfcache-{key.short}"
    facts = cachebake.image_facts("rocm=7.0.0-38\nvllm=0.32.0+cpu\n", base, "0.32.0")
    assert facts == FACTS
    with pytest.raises(cachebake.BakeError, match="has vLLM 0.31.0"):
        cachebake.image_facts("rocm=\nvllm=0.31.0\n", base, "0.32.0")
    with pytest.raises(cachebake.BakeError, match="no vLLM version"):
        cachebake.image_facts("rocm=7\nvllm=\n", base, "0.32.0")


def test_bake_run_argv_mounts_empty_bake_dirs_detached(lab_config, lab_placements):
    instance = lab_config.instances()[0]
    argv = cachebake.bake_run_argv(lab_config, instance, lab_placements[instance.name], [44], "/var/cache/b/k")
    assert argv[:3] == ["/usr/bin/docker", "run", "-d"]
    assert "/var/cache/b/k/triton:/root/.triton/cache" in argv
    assert "TRITON_CACHE_DIR=/root/.triton/cache" in argv
    assert not any(a.startswith("/var/cache/vllm/") for a in argv)


def test_group_data_with_image_replaces_and_appends():
    text = "# comment\nvllm_profile: x\nvllm_image_tag: old\n"
    out = cachebake.group_data_with_image(text, "r.example/v", "t-rfcache-0123456789ab", DIGEST)
    assert out.startswith('# comment\nvllm_profile: x\nvllm_image_tag: "t-rfcache-0123456789ab"\n')
    assert 'vllm_image_repository: "r.example/v"' in out and f'vllm_image_digest: "{DIGEST}"' in out
    assert out.count("vllm_image_tag") == 1


def test_pack_puts_each_cache_at_its_container_path(tmp_path):
    """cache-bake.sh pack/list: the layer holds every file at LAYOUT's path; content checksum is stable."""
    for d in cachedirs.LAYOUT:
        (tmp_path / "bake" / d.name / "sub").mkdir(parents=True)
        (tmp_path / "bake" / d.name / "sub" / "f").write_text(d.name)
    layer = tmp_path / "bake.context" / cachebake.LAYER  # the context does not exist yet: pack makes it
    pairs = [f"{d.name}={d.path}" for d in cachedirs.LAYOUT]
    script = str(scripts.DIR / "cache-bake.sh")
    sha = subprocess.run(["sh", script, "pack", str(tmp_path / "bake"), str(layer), *pairs], check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert len(sha) == 64
    with tarfile.open(layer) as tar:
        files = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
        assert all(m.uid == 0 and m.gid == 0 for m in tar.getmembers())
    assert files == {f"{d.path.lstrip('/')}/sub/f": d.name for d in cachedirs.LAYOUT}
    listing = subprocess.run(["sh", script, "list", str(tmp_path / "bake")], check=True, capture_output=True, text=True)
    m = cachebake.manifest(listing.stdout, sha)
    assert m.files == 4 and set(m.caches) == {d.name for d in cachedirs.LAYOUT}
    again = subprocess.run(["sh", script, "list", str(tmp_path / "bake")], check=True, capture_output=True, text=True)
    assert again.stdout == listing.stdout


# --- warm-up ------------------------------------------------------------------------------------


def test_capture_sizes_follow_vllm_defaults(lab_config):
    profile = lab_config.profile.model_copy(update={"max_num_seqs": None})  # vLLM's default, 256
    assert warmup.capture_sizes(lab_config.profile) == [1, 2, 4, 8, 16]  # the lab profile's 8
    sizes = warmup.capture_sizes(profile)
    assert sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 512 and 248 in sizes and 256 in sizes and 264 not in sizes
    small = profile.model_copy(update={"max_num_seqs": 16})
    assert warmup.capture_sizes(small) == [1, 2, 4, 8, 16, 24, 32]
    assert warmup.capture_sizes(profile.model_copy(update={"cudagraph_mode": "NONE"})) == []
    assert warmup.capture_sizes(profile.model_copy(update={"max_num_batched_tokens": 20})) == [1, 2, 4, 8, 16]


def test_plan_has_bench_shapes_then_every_capture_size(lab_config):
    steps = warmup.plan(lab_config.profile)  # max_num_seqs 8
    assert steps[0] == warmup.Step(200, 15, 4, 4)  # the lab profile's smoke case (bench section)
    assert [s.concurrency for s in steps[1:]] == [1, 2, 4, 8, 16]
    assert all(s.requests == s.concurrency for s in steps)


def test_warmup_script_and_readiness_hook(lab_config):
    text = warmup.script(lab_config.profile, 8000)
    assert "vllm-warmup.sh 8000 '\"tiny-llama\"' 200:15:4:4 16:8:1:1" in text
    wait = readiness.wait_script(8000, "tiny-llama", 60, "vllm-a", warmup=text)
    assert wait.index("done;") < wait.index("vllm-warmup.sh") and "warm-up failed" in wait
    assert "vllm-warmup.sh" not in readiness.wait_script(8000, "tiny-llama", 60, "vllm-a")


def test_warmup_script_sends_exact_token_counts(tmp_path):
    """vllm-warmup.sh under sh, with a curl stand-in that records bodies: counts, lengths, failures."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "bodies"
    (bin_dir / "curl").write_text(
        '#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -d ] && printf \'%s\\n\' "$2" >>' + str(log) + "; shift; done\n"
        "echo 200\n"
    )
    (bin_dir / "curl").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    script = str(scripts.DIR / "vllm-warmup.sh")
    out = subprocess.run(["sh", script, "8000", '"m"', "3:2:2:4", "1:1:1:1"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    bodies = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(bodies) == 5
    assert sorted(len(b["prompt"]) for b in bodies) == [1, 3, 3, 3, 3]
    assert all(b["model"] == "m" and b["ignore_eos"] for b in bodies)
    (bin_dir / "curl").write_text("#!/bin/sh\necho 503\n")
    failed = subprocess.run(["sh", script, "8000", '"m"', "1:1:1:2"], env=env, capture_output=True, text=True)
    assert failed.returncode == 1 and "2 failed" in failed.stdout


@pytest.mark.parametrize(
    "text",
    [
        "vllm_image_tag:\n  old\n",  # a value on the next line
        "vllm_image_tag: >-\n  old\n",  # a block scalar
        "vllm_image_tag: a\nvllm_image_tag: b\n",  # given twice
        "a: [1\n",  # not YAML
    ],
)
def test_cache_bake_write_refuses_a_file_it_cannot_edit_before_the_bake(tmp_path, monkeypatch, capsys, text):
    from rocmfleet import entry
    from rocmfleet.cli import cache as cache_command
    from rocmfleet.fleet import inventory as fleet

    target = tmp_path / "lab.yml"
    target.write_text(text)
    from rocmfleet.fleet.cache import cachebake

    monkeypatch.setattr(fleet, "load_fleet", lambda *a, **k: ["h"])
    monkeypatch.setattr(cache_command, "_not_loaded", lambda path: None)  # the inventory loads it
    monkeypatch.setattr(cachebake, "bake", lambda *a, **k: pytest.fail("the bake ran"))
    assert entry.main(["cache", "bake", "inv.py", "--host", "h", "--write", str(target)]) == 2
    assert str(target) in capsys.readouterr().err
    assert target.read_text() == text
