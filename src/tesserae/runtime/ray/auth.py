"""Ray's token authentication, for ``tesserae server --executor ray --ray-address HOST:PORT``.

Ray 2.5x turns token authentication on for a cluster whose head was started with a token (``ray
start`` after ``ray get-auth-token --generate``, or with ``RAY_AUTH_MODE=token``). A driver that
connects with ``address="auto"`` picks the token up by itself, but one given an explicit address
does not (nor does a ``ray start --address`` worker: it needs ``RAY_AUTH_MODE=token`` and the
token), even with the token at hand: the GCS then answers ``InvalidAuthToken`` some twenty times
and ``ray.init`` only says "Failed to connect". So before connecting to an explicit address the
server turns token mode on whenever a token is available (``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``; an explicit ``RAY_AUTH_MODE`` is respected), which
sets ``RAY_AUTH_MODE=token`` in its environment, as Ray does, so that what Ray starts from it
inherits the mode; and a refused connection is reported in one line that names token
authentication and what to set, before the server writes anything (``ray.connect`` runs first).

The token stays the server's: jobs never see it (``job.env``), and the agents hold their own
through Ray.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

MODE_VAR = "RAY_AUTH_MODE"
HINT = ("give the server the cluster's token: export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=... (print it with "
        "'ray get-auth-token' on the head node), or put it in ~/.ray/auth_token or RAY_AUTH_TOKEN_PATH=FILE")
_AUTH_SIGNS = ("InvalidAuthToken", "Unauthenticated", "AuthenticationError", "authentication token")


def token_available() -> bool:
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return True
    for path in (os.environ.get("RAY_AUTH_TOKEN_PATH"), str(Path.home() / ".ray" / "auth_token")):
        if path:
            with contextlib.suppress(OSError):
                if Path(path).read_text().strip():
                    return True
    return False


def enable_token_auth() -> bool:
    """Turn Ray's token mode on for this process if a token is available; True when it is on."""
    mode = os.environ.get(MODE_VAR)
    if mode is not None:
        return mode.strip().lower() == "token"
    if not token_available():
        return False
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication: nothing to turn on
        return False
    return bool(maybe_enable_token_auth_if_token_available(warn_if_disabled=False))


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Collect what is written to file descriptor 2 (Ray's C++ core logs there) while connecting;
    the text is in the yielded list afterwards."""
    out: list[str] = []
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read(1 << 20).decode(errors="replace"))


def auth_failure(address: str, error: BaseException, logged: str, token_on: bool) -> str | None:
    """The one-line explanation when a connection failed for want of (the right) token, else None."""
    text = f"{type(error).__name__}: {error}\n{logged}"
    if not any(sign in text for sign in _AUTH_SIGNS):
        return None
    mode = os.environ.get(MODE_VAR, "").strip()
    if mode and mode.lower() != "token":
        return (f"the Ray cluster at '{address}' uses token authentication (InvalidAuthToken) and {MODE_VAR}={mode} "
                "here turns it off: " + HINT)
    if token_on and token_available():
        return (f"the Ray cluster at '{address}' refused this server's token (Ray token authentication: "
                "InvalidAuthToken): the token here is not the cluster's; " + HINT)
    return (f"the Ray cluster at '{address}' uses token authentication and no token was found here "
            "(InvalidAuthToken): " + HINT)
