"""Re-export of the user-facing error type (defined in ``core`` so that ``core`` imports nothing else)."""

from tesserae.core.errors import InputError

__all__ = ["InputError"]
