"""Serving the dashboard with uvicorn (``taskq dashboard``)."""

from __future__ import annotations

import ipaddress
import logging

import uvicorn

from taskq.app import App
from taskq.dashboard import asgi

logger = logging.getLogger(__name__)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def serve(
    app: App,
    *,
    host: str,
    port: int,
    prefix: str = "",
    read_only: bool = False,
    token: str | None = None,
    basic_auth: str | None = None,
) -> None:
    """Run the dashboard until Ctrl-C or SIGTERM."""
    if not _is_loopback(host) and not (token or basic_auth):
        logger.warning(
            "dashboard on %s without --token or --basic-auth: anyone who reaches it can %s",
            host,
            "read every job's arguments" if read_only else "retry, purge and cancel jobs",
        )
    web = asgi(app, prefix=prefix, read_only=read_only, token=token, basic_auth=basic_auth)
    path = "/" + prefix.strip("/") if prefix.strip("/") else ""
    logger.info("dashboard on http://%s:%d%s/%s", host, port, path, " (read-only)" * read_only)
    uvicorn.run(web, host=host, port=port, log_level="warning", access_log=False)
