"""Runs every query of the Grafana dashboard, and checks every alert rule, against a Prometheus that scrapes
a running kafka-mirror-proxy (docker/smoke-test.sh starts both).

    python3 docker/check-queries.py PROMETHEUS_URL DASHBOARD_JSON
    python3 docker/check-queries.py PROMETHEUS_URL --wait-series METRIC   (until 2 scrapes have it)

A query passes when Prometheus evaluates it without error and it returns series, except the ones that
filter with `> 0` (a configured throttle, FAILED partitions by reason), which may be empty on a healthy
mirror. The copy-rate panels must show a rate above zero (the smoke test copies while Prometheus
scrapes). An alert rule passes when Prometheus evaluated it with health "ok". Exits 1 on any failure.
"""

import json
import sys
import time
import urllib.parse
import urllib.request

# What Grafana puts in for the dashboard's variables: the "All" value of $mirror, a rate window.
SUBSTITUTIONS = {"$mirror": ".*", "$__rate_interval": "1m"}
MOVING = ("kafka_mirror_proxy_mirror_copied_records_total", "kafka_mirror_proxy_mirror_copied_bytes_total")


def get(base, path, **params):
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def query(base, expr):
    try:
        return get(base, "/api/v1/query", query=expr)
    except urllib.error.HTTPError as e:  # 400: the expression does not parse or evaluate
        return json.load(e)


def wait_for_samples(base, metric, samples):
    """Until every series of `metric` has `samples` scrapes in the last minute: rate() needs two,
    the alert rules a few evaluations."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            series = query(base, f"count_over_time({metric}[1m])")["data"]["result"]
            if series and min(float(s["value"][1]) for s in series) >= samples:
                return
        except OSError:
            pass  # Prometheus still starting
        time.sleep(0.5)
    sys.exit(f"FAIL: Prometheus did not scrape {metric} {samples} times within 60 s")


def main():
    base = sys.argv[1].rstrip("/")
    if sys.argv[2] == "--wait-series":
        # So that what is copied next shows as a rate.
        wait_for_samples(base, sys.argv[3], 2)
        return
    dashboard_path = sys.argv[2]
    wait_for_samples(base, 'up{job="kafka-mirror-proxy"}', 5)
    dashboard = json.load(open(dashboard_path))
    failures = []
    exprs = [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel.get("targets", [])]
    for title, expr in exprs:
        concrete = expr
        for variable, value in SUBSTITUTIONS.items():
            concrete = concrete.replace(variable, value)
        answer = query(base, concrete)
        if answer.get("status") != "success":
            failures.append(f"{title}: {expr}: {answer.get('error')}")
            continue
        result = answer["data"]["result"]
        values = [float(series["value"][1]) for series in result]
        shown = ", ".join(f"{v:g}" for v in values[:4]) + (" ..." if len(values) > 4 else "")
        print(f"   {len(result):>3} series  {title}: {shown or '(none)'}")
        may_be_empty = expr.rstrip().endswith("> 0")
        if not result and not may_be_empty:
            failures.append(f"{title}: {expr}: no series")
        if any(name in expr for name in MOVING) and not any(v > 0 for v in values):
            failures.append(f"{title}: {expr}: no copying seen ({values})")
    mirrors = get(base, "/api/v1/label/mirror/values", **{"match[]": "kafka_mirror_proxy_mirror_partitions"})["data"]
    print(f"   $mirror variable: {mirrors}")
    if not mirrors:
        failures.append("the $mirror variable's query finds no mirror")
    rules = [rule for group in get(base, "/api/v1/rules")["data"]["groups"] for rule in group["rules"]]
    for rule in rules:
        print(f"   alert {rule['name']}: health {rule['health']}, state {rule.get('state')}")
        if rule["health"] != "ok":
            failures.append(f"alert {rule['name']}: {rule.get('lastError')}")
    if not rules:
        failures.append("Prometheus loaded no alert rules")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    print(f"   {len(exprs)} dashboard queries, {len(rules)} alert rules, {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
