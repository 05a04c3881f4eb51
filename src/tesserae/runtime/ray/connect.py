"""Reaching a Ray cluster: the address checked first, ``ray.init`` with a bound on its wait, clear errors.

``ray.init`` retries an unreachable address for minutes and says why it failed on stderr rather
than in its exception, so the address is looked at first (well formed? does something listen
there?), the init runs in a thread joined with ``CONNECT_TIMEOUT``, and a failure is turned into
one line (``ray.auth`` reads Ray's own words for token authentication failures). Ray is imported
only here and only when asked for: a server without Ray says how to get it.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

from tesserae.core.errors import InputError
from tesserae.runtime.ray import auth as ray_auth

NAMESPACE = "tesserae"
CONNECT_TIMEOUT = 60.0
RAY_HINT = "pip install 'tesserae[ray]'"


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError(f"--executor ray needs Ray, which is not installed here ({RAY_HINT})",
                         field="executor") from None
    return ray


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]


def _host_port(address: str) -> tuple[str, int] | None:
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def check_address(address: str | None) -> None:
    """A quick look before anything else: is the address well formed, and does something listen there?
    (``ray.init`` itself retries an unreachable address for minutes.)"""
    if address is None or address == "auto":
        return
    hp = _host_port(address)
    if hp is None:
        raise InputError(f"'{address}' is not a Ray address (HOST:PORT, ray://HOST:PORT or auto)",
                         field="ray-address")
    try:
        socket.create_connection(hp, timeout=5.0).close()
    except OSError as e:
        raise InputError(f"cannot reach the Ray cluster at '{address}': {e.strerror or e}",
                         field="ray-address") from None


def join(ray: Any, address: str | None, virtual_gpus: int | None, said: list[str] | None = None) -> bool:
    """Join the Ray cluster at ``address``, or start a local instance (None); True when one was started.
    What Ray's core wrote while connecting to ``address`` is appended to ``said`` (for ``ray.logs``)."""
    opts: dict[str, Any] = {"namespace": NAMESPACE, "include_dashboard": False, "log_to_driver": False,
                            "logging_level": logging.ERROR}
    if address is None:
        if virtual_gpus is not None:
            opts["num_gpus"] = virtual_gpus
        try:
            ray.init(address="local", **opts)
        except Exception as e:
            raise InputError(f"cannot start a local Ray instance: {first_line(e)}") from None
        return True
    check_address(address)
    logged = _init_with_timeout(ray, address, opts)
    if said is not None:
        said.append(logged)
    return False


def _init_with_timeout(ray: Any, address: str, opts: dict[str, Any]) -> str:
    failure: list[BaseException] = []
    token_on = ray_auth.enable_token_auth()  # an explicit address never turns it on by itself (ray_auth)

    def go() -> None:
        try:
            ray.init(address=address, **opts)
        except BaseException as e:
            failure.append(e)

    with ray_auth.captured_stderr() as logged:  # Ray's core says why it failed there, not in the error
        t = threading.Thread(target=go, name="tesserae-ray-init", daemon=True)
        t.start()
        t.join(CONNECT_TIMEOUT)
    if t.is_alive():
        raise InputError(f"no answer from a Ray cluster at '{address}' after {CONNECT_TIMEOUT:g} s "
                         "(is it a Ray head node's GCS address, HOST:6379?)", field="ray-address")
    if failure:
        auth = ray_auth.auth_failure(str(address), failure[0], "".join(logged), token_on)
        raise InputError(auth or f"cannot connect to the Ray cluster at '{address}': "
                                 f"{first_line(failure[0])}", field="ray-address")
    return "".join(logged)
