"""examples/k8s/ parses, and points at what taskq serves: the probe paths and port the
worker is started with, the dashboard's /api/scale route and port with the field KEDA reads,
the gauge the HPA scales on, a -c that matches KEDA's per-replica target."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from taskq.cli.dashboard import dashboard
from taskq.cli.worker import worker
from taskq.ops.queue_metrics import DESIRED_GAUGE
from taskq.worker.health import LIVE_PATH, READY_PATH
from taskq.worker.scaling import document
from tests.yaml_subset import load_all

K8S = Path(__file__).resolve().parents[2] / "examples" / "k8s"


def objects() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in load_all(path.read_text()):
            found[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return found


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def options(command: list[str], name: str) -> dict[str, Any]:
    """The options ``taskq ... <name> ...`` parses into (click checks them as the CLI would)."""
    cli = {"worker": worker, "dashboard": dashboard}[name]
    args = command[command.index(name) + 1 :]
    with cli.make_context(name, args) as ctx:
        return dict(ctx.params)


def test_every_example_parses() -> None:
    assert set(objects()) == {
        "Deployment/taskq-worker",
        "Deployment/taskq-dashboard",
        "Service/taskq-dashboard",
        "ScaledObject/taskq-worker",
        "TriggerAuthentication/taskq-dashboard",
        "HorizontalPodAutoscaler/taskq-worker",
    }


def test_the_worker_probes_what_its_health_port_serves() -> None:
    deployment = objects()["Deployment/taskq-worker"]
    c = container(deployment)
    given = options(c["command"], "worker")
    assert given["health_host"] == "0.0.0.0"  # the kubelet probes the pod's address
    assert c["livenessProbe"]["httpGet"] == {"path": LIVE_PATH, "port": given["health_port"]}
    assert c["readinessProbe"]["httpGet"] == {"path": READY_PATH, "port": given["health_port"]}
    grace_s = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace_s > given["grace"]  # running jobs get their grace before the SIGKILL


def test_keda_reads_the_dashboards_scale_endpoint_and_scales_to_zero() -> None:
    pytest.importorskip("starlette")
    from taskq.dashboard.app import routes

    found = objects()
    scaled = found["ScaledObject/taskq-worker"]["spec"]
    assert scaled["minReplicaCount"] == 0
    assert scaled["scaleTargetRef"]["name"] == "taskq-worker"
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "metrics-api"
    meta = trigger["metadata"]
    url = urlsplit(meta["url"])
    service = found["Service/taskq-dashboard"]
    dash = options(container(found["Deployment/taskq-dashboard"])["command"], "dashboard")
    assert url.hostname == service["metadata"]["name"]
    assert url.port == service["spec"]["ports"][0]["port"] == dash["port"]
    assert service["spec"]["ports"][0]["targetPort"] == dash["port"]
    assert url.path in {getattr(r, "path", None) for r in routes()}
    assert url.query == "queue=tasks"
    assert meta["valueLocation"] in document([])
    worker_c = options(container(found["Deployment/taskq-worker"])["command"], "worker")
    assert int(meta["targetValue"]) == worker_c["concurrency"]  # replicas = processes / -c
    assert meta["authMode"] == "bearer" and dash["read_only"]


def test_the_hpa_scales_on_the_gauge() -> None:
    found = objects()
    spec = found["HorizontalPodAutoscaler/taskq-worker"]["spec"]
    (metric,) = spec["metrics"]
    assert metric["external"]["metric"]["name"] == DESIRED_GAUGE
    assert spec["minReplicas"] >= 1  # an HPA does not scale to zero
    worker_c = options(container(found["Deployment/taskq-worker"])["command"], "worker")
    assert int(metric["external"]["target"]["averageValue"]) == worker_c["concurrency"]


@pytest.mark.parametrize("bad", ["a: {b: 1}", "a: 'x'", "a: &anchor 1", "a:\n    b: 1\n  c: 2"])
def test_the_reader_refuses_yaml_outside_its_subset(bad: str) -> None:
    with pytest.raises(ValueError):
        load_all(bad)
