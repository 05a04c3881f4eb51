"""Tesserae: a GPU cluster scheduler for deep-learning training jobs.

One scheduler core (``tesserae.scheduler``) drives a trace-driven simulator (``tesserae.sim``)
and a runtime (``tesserae.runtime``).
"""

__version__ = "0.1.0"
