"""Eager mode and workflows, loaded when first used: the app calls them through here, so
that ``import taskq`` (a web process that only enqueues) does not load them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from taskq.broker.steps import Steps
    from taskq.canvas import Workflow
    from taskq.job import Flow, HandleApp, Job
    from taskq.protocols import Producer


def run_job(app: Producer, body: bytes) -> Job:
    """:func:`taskq.eager.run_job`."""
    from taskq.eager import run_job

    return run_job(app, body)


def run_workflow(workflow: Workflow, app: Producer) -> Flow:
    """:func:`taskq.eager.run_workflow`."""
    from taskq.eager import run_workflow

    return run_workflow(workflow, app)


def launch_steps(workflow: Workflow, app: Producer) -> Steps[Flow]:
    """:func:`taskq.launch.launch_steps`."""
    from taskq.launch import launch_steps

    return launch_steps(workflow, app)


def flow_handle(flow_id: str, queue: str, raw: dict[bytes, bytes], app: HandleApp) -> Flow:
    """:func:`taskq.launch.flow_handle`."""
    from taskq.launch import flow_handle

    return flow_handle(flow_id, queue, raw, app)
