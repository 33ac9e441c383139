"""How many autotune picks this process read from rooflint's store and how many its autotuners timed.

The kernels' store (kernels/common/autotune_picks.py) counts here and the measuring worker reports the
counts as the run record's "autotune" cache: the engine asks no family module by name.
"""

from __future__ import annotations

PICKS = {"hits": 0, "misses": 0}  # hits: read from the store; misses: timed, then stored
