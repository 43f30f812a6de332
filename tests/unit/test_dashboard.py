"""The packaged Grafana dashboard (``rocmfleet/dashboards/fleet.json``): valid JSON for import, every
panel with its own id and a query, and every metric its PromQL names is a family that the lab's
vLLM image (a recorded 0.32.0 page) or the AMD exporter's stand-in (its recorded exposition) serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocmfleet.domain import metricfamilies
from rocmfleet.fleet.metrics.read import families

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "rocmfleet" / "dashboards" / "fleet.json"
#: ``/metrics`` of the lab's vLLM 0.32.0 CPU instance after a few requests.
VLLM_PAGE = ROOT / "tests" / "fixtures" / "metrics" / "vllm-0.32.0-cpu.txt"
#: What the lab's stand-in of AMD's device-metrics-exporter serves.
EXPORTER_PAGE = ROOT / "tests" / "lab" / "standin" / "exporter-metrics.prom"
#: Series Prometheus makes itself for every target, on no ``/metrics`` page: ``up`` (1 when the
#: target's last scrape answered; Prometheus docs, "Jobs and instances", automatically generated
#: labels and time series). Kept short: anything else a query names must be served.
PROMETHEUS_SYNTHESISED = frozenset({"up"})
#: What rocmfleet counts as a request (the soak's rule, ``docs/fleet.md``): POST on an inference
#: handler; ``GET /v1/models`` and other GETs are not requests.
REQUEST_MATCHERS = (
    'method="POST", handler=~"/v1/(chat/)?completions|/v1/embeddings|/v1/responses|/v1/rerank|/v1/score|/v1/audio/.*"'
)
#: Grafana's grid is 24 columns wide.
GRID_COLUMNS = 24

#: PromQL's aggregations, functions' keywords, binary operators and modifiers (not metric names).
KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
    | {"atan2", "inf", "nan"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_OFFSET = re.compile(r"\boffset\s+-?[0-9a-zA-Z_$]+")
_IDENTIFIER = re.compile(r"(?<![\w.:$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names of a PromQL expression: its identifiers less function calls, keywords, label
    names in ``{...}``, ``by (...)``/``without (...)`` lists (and the vector matching lists),
    ranges and durations, ``offset``, numbers, strings and Grafana variables (``$host``)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names


def variable_query_names(query: str) -> set[str]:
    """The metric names of a Grafana Prometheus variable query: ``label_values(EXPR, LABEL)`` reads
    ``EXPR``'s; ``label_values(LABEL)`` none; anything else is PromQL."""
    found = re.fullmatch(r"\s*label_values\((.*)\)\s*", query, re.S)
    if not found:
        return metric_names(query)
    inner = found.group(1)
    expr, comma, _label = inner.rpartition(",")
    return metric_names(expr) if comma else set()


def load() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """``(where, expr)`` of every panel target and templating variable."""
    found = [
        (f"panel {panel['id']} {panel['title']!r} {target.get('refId')}", target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        found.append((f"variable {variable['name']}", "label_values:" + query))
    return found


def served() -> set[str]:
    missing = [str(p.relative_to(ROOT)) for p in (VLLM_PAGE, EXPORTER_PAGE) if not p.is_file()]
    if missing:
        pytest.fail(f"recorded page(s) missing: {', '.join(missing)}")
    return (
        families(VLLM_PAGE.read_text(encoding="utf-8"))
        | families(EXPORTER_PAGE.read_text(encoding="utf-8"))
        | PROMETHEUS_SYNTHESISED
    )


def unknown_names(dashboard: dict, known: set[str]) -> list[str]:
    """``where: name`` for every metric a query names that ``known`` lacks."""
    bad = []
    for where, expr in queries(dashboard):
        names = (
            variable_query_names(expr.removeprefix("label_values:"))
            if expr.startswith("label_values:")
            else metric_names(expr)
        )
        bad += [f"{where}: {name}" for name in sorted(names - known)]
    return bad


def test_dashboard_is_importable_json():
    dashboard = load()
    inputs = {i["name"]: i for i in dashboard["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource" and inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"host", "model"}
    text = DASHBOARD.read_text(encoding="utf-8")
    # Every datasource reference is the import's input, never a uid of the machine it was made on.
    uids = {m for m in re.findall(r'"uid":\s*"([^"]*)"', text)} - {"rocmfleet-fleet"}
    assert uids == {"${DS_PROMETHEUS}"}, uids


def test_every_panel_has_a_unique_id_and_a_query():
    panels = load()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), ids
    empty = [p["title"] for p in panels if not [t for t in p.get("targets", []) if t.get("expr", "").strip()]]
    assert not empty, empty


def test_every_query_names_a_served_family():
    dashboard = load()
    assert queries(dashboard), "no query found"
    assert all(metric_names(expr) or expr.startswith("label_values:") for _where, expr in queries(dashboard))
    assert unknown_names(dashboard, served()) == []


def test_the_panels_cover_what_the_issue_asks():
    names = set().union(*(metric_names(expr) for _where, expr in queries(load())))
    wanted = {
        "http_requests_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:request_time_per_output_token_seconds_bucket",
        "vllm:kv_cache_usage_perc",
        "gpu_gfx_activity",
        "gpu_used_vram",
        "gpu_total_vram",
        "gpu_package_power",
        "gpu_junction_temperature",
        "gpu_ecc_correct_total",
        "gpu_ecc_uncorrect_total",
    }
    assert wanted <= names, wanted - names


def test_a_made_up_metric_name_is_caught():
    dashboard = load()
    dashboard["panels"][0]["targets"].append(
        {"refId": "Z", "expr": 'sum by (host) (rate(vllm:num_requests_made_up_total{host=~"$host"}[5m]))'}
    )
    assert unknown_names(dashboard, served()) == [
        f"panel 1 {dashboard['panels'][0]['title']!r} Z: vllm:num_requests_made_up_total"
    ]


def test_the_recorded_vllm_page_has_the_families_rocmfleet_expects_of_0_32():
    text = VLLM_PAGE.read_text(encoding="utf-8")
    assert metricfamilies.missing(metricfamilies.vllm_families("0.32.0"), families(text)) == []


def test_the_exporter_stand_in_has_the_families_rocmfleet_expects():
    if not EXPORTER_PAGE.is_file():
        pytest.fail(f"{EXPORTER_PAGE.relative_to(ROOT)} missing")
    assert metricfamilies.missing(metricfamilies.EXPORTER, families(EXPORTER_PAGE.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('rate(http_requests_total{handler=~"/v1/.*", status="5xx"}[$__rate_interval])', {"http_requests_total"}),
        (
            "histogram_quantile(0.99, sum by (le, host) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
            {"vllm:time_to_first_token_seconds_bucket"},
        ),
        ("sum(a_total) without (instance, job) / on (host) group_left (model) b", {"a_total", "b"}),
        ("max_over_time(up[1h:5m] offset 1d) > bool 1e3", {"up"}),
        ('count(gpu_used_vram{card_model="MI300X (by) sum"}) or vector(0)', {"gpu_used_vram"}),
        ("sum(x) by (le) and on() y unless z", {"x", "y", "z"}),
        ("-inf < NaN", set()),
    ],
)
def test_metric_names_reads_identifiers_only(expr, names):
    assert metric_names(expr) == names


def test_variable_queries():
    assert variable_query_names('label_values(vllm:num_requests_running{host=~"$host"}, model)') == {
        "vllm:num_requests_running"
    }
    assert variable_query_names("label_values(host)") == set()


def panel(dashboard: dict, title_part: str) -> dict:
    found = [p for p in dashboard["panels"] if title_part.lower() in p["title"].lower()]
    assert len(found) == 1, (title_part, [p["title"] for p in dashboard["panels"]])
    return found[0]


def grid_problems(panels: list[dict]) -> list[str]:
    """What is wrong with the panels' ``gridPos``: a field not an integer, a panel outside Grafana's
    24 columns, or two panels on one cell."""
    problems = []
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        grid, name = p["gridPos"], f"panel {p['id']} {p['title']!r}"
        bad = {k: grid.get(k) for k in ("x", "y", "w", "h") if type(grid.get(k)) is not int}
        if bad:
            problems.append(f"{name}: gridPos not integers: {bad}")
            continue
        if min(grid["x"], grid["y"]) < 0 or min(grid["w"], grid["h"]) < 1 or grid["x"] + grid["w"] > GRID_COLUMNS:
            problems.append(f"{name}: outside the {GRID_COLUMNS}-column grid: {grid}")
        overlaps = {
            cells.setdefault((x, y), name)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        } - {name}
        problems += [f"{name} overlaps {other}" for other in sorted(overlaps)]
    return problems


def test_every_panel_has_an_integer_grid_position_inside_the_grid_and_none_overlap():
    assert grid_problems(load()["panels"]) == []


def test_grid_problems_are_caught():
    panels = load()["panels"]
    panels[0]["gridPos"]["w"] = {"min": 0, "max": 1}
    panels[1]["gridPos"] = {"x": 20, "y": 0, "w": 8, "h": 8}
    panels[2]["gridPos"] = dict(panels[3]["gridPos"])
    problems = grid_problems(panels)
    assert len(problems) == 3, problems
    assert "gridPos not integers: {'w': {'min': 0, 'max': 1}}" in problems[0]
    assert "outside the 24-column grid" in problems[1] and "overlaps" in problems[2]


def test_a_share_panel_keeps_its_range_in_field_config():
    kv = panel(load(), "KV-cache")
    assert kv["fieldConfig"]["defaults"]["min"] == 0 and kv["fieldConfig"]["defaults"]["max"] == 1


def _http_selectors(expr: str) -> list[str]:
    return re.findall(r"http_requests_total\{([^{}]*)\}", expr)


def test_requests_are_post_on_inference_handlers_only():
    dashboard = load()
    selectors = [s for _where, expr in queries(dashboard) for s in _http_selectors(expr)]
    assert selectors, "no http_requests_total query"
    for selector in selectors:
        assert REQUEST_MATCHERS in selector, selector
    # The rule against the recorded page: the completions count, GET /v1/models does not.
    handler = re.search(r'handler=~"([^"]*)"', REQUEST_MATCHERS)
    assert handler
    counted = set()
    for family in text_string_to_metric_families(VLLM_PAGE.read_text(encoding="utf-8")):
        for sample in family.samples:
            if sample.name == "http_requests_total":
                labels = sample.labels
                if labels["method"] == "POST" and re.fullmatch(handler.group(1), labels["handler"]):
                    counted.add(labels["handler"])
    assert counted == {"/v1/completions", "/v1/chat/completions"}, counted
    assert not re.fullmatch(handler.group(1), "/v1/models")


def test_the_error_rate_is_zero_not_no_data_before_the_first_5xx():
    """The 5xx series does not exist until an instance's first 5xx: the numerator falls back to
    ``total * 0`` (``or``), so a healthy instance shows 0, not "No data"."""
    error = panel(load(), "Error rate")
    (expr,) = [t["expr"] for t in error["targets"]]
    numerator, slash, denominator = expr.rpartition(" / ")
    assert slash, expr
    five_xx, or_, fallback = numerator.strip("()").partition(" or ")
    assert or_ and 'status="5xx"' in five_xx and fallback.endswith(" * 0"), expr
    assert fallback.removesuffix(" * 0") == denominator == five_xx.replace(', status="5xx"', ""), expr


def test_host_comes_from_every_target_and_gpu_panels_filter_by_host_only():
    dashboard = load()
    host = next(v for v in dashboard["templating"]["list"] if v["name"] == "host")
    assert host["query"]["query"] == 'label_values(up{job=~"vllm|amd-device-metrics"}, host)'
    for p in dashboard["panels"]:
        exprs = [t["expr"] for t in p["targets"]]
        if any(name.startswith("gpu_") for e in exprs for name in metric_names(e)) or "up" in metric_names(exprs[0]):
            assert all("$model" not in e and "$host" in e for e in exprs), p["title"]


def test_target_health_vram_unit_and_ecc_in_the_range():
    dashboard = load()
    up = panel(dashboard, "Targets up")
    assert [metric_names(t["expr"]) for t in up["targets"]] == [{"up"}]
    assert "by (job, host)" in up["targets"][0]["expr"]
    # AMD's exporter reports VRAM in MiB (an MI300X: 196592): Grafana's mbytes, not decmbytes (MB).
    assert panel(dashboard, "GPU memory")["fieldConfig"]["defaults"]["unit"] == "mbytes"
    ecc = panel(dashboard, "ECC")
    assert all("increase(" in t["expr"] and "[$__range]" in t["expr"] and t.get("instant") for t in ecc["targets"])
    assert "in the time range" in ecc["title"] and "$__range" in ecc["description"]
