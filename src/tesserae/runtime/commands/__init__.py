"""The runtime's commands of ``tesserae``, one module each (``jobs`` holds jobs and show; ``control``
cancel, hold, release and update).

Each module's ``register(app)`` adds its commands to a Typer app; ``tesserae.cli.COMMANDS`` names the
module of every command, which is imported only when that command runs (so ``tesserae simulate``
imports none of these, and ``tesserae jobs`` only ``jobs`` and what it uses). This package imports
nothing. Heavy imports (FastAPI, uvicorn, the scheduler) happen inside the commands, so the client
commands start fast. A usage mistake (a missing argument, ``--gpus two``) is reported like every
other user error: one line on stderr and exit status 2 (``cli_help.TesseraeCommand``). A new command
is a module here with a ``register(app)``, named in ``tesserae.cli.COMMANDS``.
"""
