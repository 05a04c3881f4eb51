"""``tesserae token create``: a token for a user, from the server (admin token) or its store directly."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tesserae.cli_help import TesseraeCommand as OneLineErrors
from tesserae.cli_help import TesseraeGroup
from tesserae.core.errors import InputError
from tesserae.runtime.commands.common import client, err


def register(app: typer.Typer) -> None:
    token_app = typer.Typer(cls=TesseraeGroup, no_args_is_help=True, rich_markup_mode=None, help="Create API tokens.")
    app.add_typer(token_app, name="token")
    token_app.command("create", cls=OneLineErrors)(token_create)


def token_create(
    user: Annotated[str, typer.Option("--user", help="User the token acts as.")],
    admin: Annotated[bool, typer.Option("--admin", help="An admin token: sees and cancels every job.")] = False,
    label: Annotated[str, typer.Option("--label", help="A note stored with the token.")] = "",
    state: Annotated[Path | None, typer.Option("--state", help="Write into this server's store directly "
                                               "(on the server machine); without it, ask the server with an "
                                               "admin TESSERAE_TOKEN.")] = None,
) -> None:
    """Create a token and print it (once: the server keeps only its hash)."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9_.@\-]{1,100}", user):
        raise InputError(f"'{user}' is not a valid user name (letters, digits, _ . @ -)", field="user")
    if state is not None:
        from tesserae.runtime.store.database import DB_NAME, Store

        store = Store(state / DB_NAME, create=False)
        try:
            token = store.create_token(user, admin=admin, label=label)
        finally:
            store.close()
    else:
        with client() as c:
            token = c.create_token(user, admin=admin, label=label)
    print(token)
    err.print(f"token for {'admin ' if admin else ''}user '{user}' (shown once; the server stores only its "
              "hash)", highlight=False)
