"""Example Tesserae plug-ins, found through the ``tesserae.policies`` and ``tesserae.placements``
entry points (see ``pyproject.toml``): ``smallest-first`` (a policy) and ``worst-fit`` (a placement)."""
