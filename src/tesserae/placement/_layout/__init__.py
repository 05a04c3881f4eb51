"""Migration-minimizing layout of one GPU type's allocation (DESIGN §4.1).

Input: the jobs that hold GPUs of one type this round (their gang sizes), and for the continuing
ones the GPUs they held last round. Output: the GPUs of every job, moving as few continuing jobs as
this package can find a layout for. ``TypePlacer.place`` builds two candidate layouts and keeps the
better one (fewer spread jobs first, then fewer moves):

1. ``held``: what the continuing jobs held, per (job, node), computed once.
2. ``anchored``: every running job stays where it ran and the new jobs are laid out around them:
   best fit from the free-GPU ``pool``, else an ``exact`` bounded search, else the cheapest
   ``eviction`` of running jobs, which are laid out again. The matching of logical to physical
   nodes is the identity. When no new job has to evict anything, no continuing job moves.
3. ``regrouped`` (only when the anchored layout moved or spread a job): the ``units`` (jobs that
   shared a node stay together) are bin-packed from scratch, a ``bulk`` step placing runs of large
   units on empty nodes at once; logical nodes are then mapped to physical ones by maximum-weight
   ``matching``. It is abandoned as soon as its ``move_bound`` (a lower bound of its moves) shows it
   cannot beat the anchored layout.
4. ``gpu_choice``: inside each node, every continuing job keeps as many of its previous GPU indices
   as its part there allows; the others take the lowest free ones.

A job is *spread* only when no consolidated layout was found (a gang that fits one node gets one
node; a larger one whole nodes plus one). Cost: per-node NumPy arrays and loops over jobs only;
a decision that moves nobody costs vector operations over the GPUs plus a loop over the new jobs.
"""

from tesserae.placement._layout.nodes import TypeLayout
from tesserae.placement._layout.type_placer import TypePlacer

__all__ = ["TypeLayout", "TypePlacer"]
