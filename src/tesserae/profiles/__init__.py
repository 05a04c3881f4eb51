"""Throughput and co-location tables: readers, the built-in default model, and ``load_profile``."""

from tesserae.profiles.colocation import ColocationTable
from tesserae.profiles.default_model import DefaultModel, DefaultModelConfig
from tesserae.profiles.loader import load_profile
from tesserae.profiles.table_model import ANY_GPU, TableModel

__all__ = ["ANY_GPU", "ColocationTable", "DefaultModel", "DefaultModelConfig", "TableModel", "load_profile"]
