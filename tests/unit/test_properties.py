"""Property-based tests (hypothesis) over placement, flag rendering and unit quoting."""

from __future__ import annotations

import shlex
from typing import get_args

from hypothesis import given, settings
from hypothesis import strategies as st

from rocmfleet.config.settings import ConfigError, host_config
from rocmfleet.domain import flagrender, flags
from rocmfleet.domain.placement import InstanceShape, PlacementError, place
from rocmfleet.domain.systemd import exec_line
from rocmfleet.domain.topology import Gpu, NumaNode, Topology


@st.composite
def numa_nodes(draw, n_numa: int, min_per_range: int = 1) -> tuple[NumaNode, ...]:
    """``n_numa`` nodes, each one CPU range or two sibling ranges (SMT, numbered as Linux does:
    second threads after all first threads) of ``min_per_range``-40 CPUs."""
    smt = draw(st.booleans())
    sizes = [draw(st.integers(min_per_range, 40)) for _ in range(n_numa)]
    starts = [sum(sizes[:i]) for i in range(n_numa)]
    nodes = []
    for node, (start, size) in enumerate(zip(starts, sizes, strict=True)):
        cpus = list(range(start, start + size))
        if smt:  # siblings from 200 on: never adjacent to the first threads (4 × 40 < 200)
            cpus += range(200 + start, 200 + start + size)
        nodes.append(NumaNode(node, tuple(cpus), 1024))
    return tuple(nodes)


@st.composite
def topologies(draw, min_per_range: int = 16) -> Topology:
    """1-16 GPUs with increasing render minors (gaps allowed) on 1-4 NUMA nodes with CPUs.

    With the default ``min_per_range`` every node has a CPU (per sibling range) for each of its
    GPUs, so any valid shape places; 1 gives nodes too small for their instances.
    """
    n_numa = draw(st.integers(1, 4))
    numa = draw(numa_nodes(n_numa, min_per_range))
    n = draw(st.integers(1, 16))
    gaps = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    minors, minor = [], 128
    for gap in gaps:
        minors.append(minor)
        minor += 1 + gap
    gpus = tuple(
        Gpu(i, f"0000:{i + 1:02x}:00.0", i + 1, minors[i], draw(st.integers(0, n_numa - 1)), "SPX", 0x74A1, 90402)
        for i in range(n)
    )
    return Topology(gpus, numa)


@st.composite
def valid_shapes(draw, min_per_range: int = 16) -> tuple[Topology, list[InstanceShape]]:
    topology = draw(topologies(min_per_range))
    indices = list(draw(st.permutations([g.index for g in topology.gpus])))
    shapes, port = [], 8000
    while indices:
        tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if d <= len(indices)]))
        take, indices = indices[:tp], indices[tp:]  # vLLM's world is the TP size: one GPU per rank
        shapes.append(InstanceShape(f"i{len(shapes)}", port, tuple(take), tp))
        port += 1
    return topology, shapes


@given(valid_shapes())
@settings(max_examples=200, deadline=None)
def test_valid_shapes_place_on_disjoint_existing_render_nodes(case):
    topology, shapes = case
    placements = place(shapes, topology)
    nodes = [node for p in placements for node in p.render_nodes]
    assert len(nodes) == len(set(nodes))
    assert set(nodes) <= {f"/dev/dri/renderD{g.render_minor}" for g in topology.gpus}
    _assert_disjoint_cpus_of_own_nodes(topology, shapes, placements)


def _assert_disjoint_cpus_of_own_nodes(topology, shapes, placements) -> None:
    """Every placed instance has CPUs, only of its GPUs' nodes, none shared; together they use every
    CPU of those nodes; its memory nodes are exactly its GPUs' nodes."""
    taken: dict[int, str] = {}
    for shape, placement in zip(shapes, placements, strict=True):
        assert len(placement.render_nodes) == len(shape.gpus)
        nodes = {topology.gpu(i).numa_node for i in shape.gpus}
        own = {c for n in nodes for c in topology.numa(n).cpus}
        cpus = _ids(placement.cpuset_cpus)
        assert cpus and cpus <= own
        assert _ids(placement.cpuset_mems) == nodes
        for cpu in cpus:
            assert cpu not in taken, f"CPU {cpu} given to {taken[cpu]!r} and {shape.name!r}"
            taken[cpu] = shape.name
    used_nodes = {topology.gpu(i).numa_node for s in shapes for i in s.gpus}
    assert set(taken) == {c for n in used_nodes for c in topology.numa(n).cpus}


@given(valid_shapes(min_per_range=1))
@settings(max_examples=200, deadline=None)
def test_a_node_too_small_for_its_instances_is_refused_naming_it(case):
    topology, shapes = case
    sharers = {
        n.node: sum(any(topology.gpu(i).numa_node == n.node for i in s.gpus) for s in shapes)
        for n in topology.numa_nodes
    }
    too_small = {
        node
        for node, count in sharers.items()
        if count and min(len(r) for r in _ranges(topology.numa(node).cpus)) < count
    }
    try:
        placements = place(shapes, topology)
    except PlacementError as exc:
        assert too_small
        assert {int(p.split(":")[0].removeprefix("NUMA node ")) for p in exc.problems} == too_small
        return
    assert not too_small
    _assert_disjoint_cpus_of_own_nodes(topology, shapes, placements)


def _ranges(cpus) -> list[list[int]]:
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


def _ids(text: str) -> set[int]:
    return {c for part in filter(None, text.split(",")) for c in _expand(part)}


def _expand(part: str) -> list[int]:
    lo, _, hi = part.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


@given(valid_shapes(), st.data())
@settings(max_examples=200, deadline=None)
def test_a_gpu_given_twice_or_tp_not_dividing_is_refused(case, data):
    topology, shapes = case
    first = shapes[0]
    broken = data.draw(st.sampled_from(["twice", "tp"]))
    if broken == "twice":
        shapes = [*shapes, InstanceShape("extra", 9999, first.gpus[:1], 1)]
    else:
        shapes = [InstanceShape(first.name, first.port, first.gpus, len(first.gpus) + 1), *shapes[1:]]
    try:
        place(shapes, topology)
    except PlacementError:
        return
    raise AssertionError(f"accepted an impossible shape: {shapes}")


serving = st.builds(
    flags.ServingSettings,
    tensor_parallel_size=st.none() | st.sampled_from([1, 2, 4, 8]),
    max_model_len=st.none() | st.integers(1, 131072),
    kv_cache_dtype=st.none() | st.sampled_from(get_args(flags.KvCacheDtype)),
    attention_backend=st.none() | st.sampled_from(get_args(flags.AttentionBackend)),
    cudagraph_mode=st.none() | st.sampled_from(get_args(flags.CudagraphMode)),
    aiter=st.none() | st.booleans(),
    aiter_mha=st.none() | st.booleans(),
    disable_log_requests=st.none() | st.booleans(),
    use_v1=st.none() | st.booleans(),
)
versions = st.sampled_from(["0.9.0", "0.9.2", "0.10.1", "0.11.0", "0.11.1", "0.12.0", "0.13.0", "0.14.0", "0.33.0"])


@given(serving, versions)
@settings(max_examples=300, deadline=None)
def test_rendering_either_refuses_clearly_or_gives_parseable_flags(settings_, version):
    try:
        rendered = flagrender.render(settings_, version)
    except flags.FlagError as exc:
        assert exc.problems and all(version in p or "vLLM" in p for p in exc.problems)
        return
    assert all(arg.startswith("--") for arg in rendered.args[::2] if arg.startswith("-"))
    assert all(name.isupper() or name.startswith("VLLM") for name in rendered.env)
    argv = ["/usr/bin/docker", "run", "img", *rendered.args]
    assert _systemd_words(exec_line(argv)) == argv


def _systemd_words(line: str) -> list[str]:
    """Split an Exec line the way systemd does for what exec_line emits (quotes, \\, %%, $$)."""
    words = shlex.split(line.replace(" \\\n    ", " "))
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


@given(st.lists(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20), min_size=1, max_size=8))
@settings(max_examples=300, deadline=None)
def test_unit_quoting_round_trips(argv):
    assert _systemd_words(exec_line(argv)) == argv


BAD_VALUES = {
    "vllm_shm_size_gib": [0, -1, "16G", 1.5],
    "vllm_ready_timeout_s": [0, -5, "fast"],
    "vllm_image_digest": ["latest", "sha256:abc", "md5:" + "0" * 32],
    "docker_source": ["snap", ""],
    "apt_proxy": ["proxy:3128", "ftp://x"],
    "vllm_profile": ["Llama", "no-such-profile"],
    "vllm_env": [{"1BAD": "x"}, {"A-B": "x"}],
}


@given(st.sampled_from(sorted(BAD_VALUES)), st.data())
@settings(max_examples=100, deadline=None)
def test_no_invalid_value_passes_validation(key, data):
    value = data.draw(st.sampled_from(BAD_VALUES[key]))
    host = {"vllm_profile": "llama-3.3-70b", key: value}
    try:
        host_config(host)
    except ConfigError as exc:
        assert any(p.key.startswith(key) for p in exc.problems), exc
        return
    raise AssertionError(f"{key}={value!r} passed validation")
