"""``tesserae profile``: measured throughput profiles from real PyTorch training steps (DESIGN §5.1).

- :mod:`~tesserae.profiler.catalogue`: the models' names and sizes (no PyTorch needed);
- :mod:`~tesserae.profiler.models`: the networks in plain ``torch.nn`` and their training steps;
- :mod:`~tesserae.profiler.worker`: one measuring process, the process that forks them, the probe;
- :mod:`~tesserae.profiler.pool`: the zygote that forks the measuring processes;
- :mod:`~tesserae.profiler.runner`: plans and runs the measurements;
- :mod:`~tesserae.profiler.document`: the measured profile as a document, written;
- :mod:`~tesserae.profiler.cli_command`: the command itself.

PyTorch is an optional extra (``pip install 'tesserae[profiler]'``); importing this package does not
import it. See docs/profiler.md.
"""

from tesserae.profiler.catalogue import CATALOGUE, MODEL_NAMES, SIZES

__all__ = ["CATALOGUE", "MODEL_NAMES", "SIZES"]
