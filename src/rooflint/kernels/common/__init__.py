"""What several kernel families share: the last-arrival counter (arrival), programmatic dependent
launch (pdl), Gluon's Hopper ops (gluon), the tanh GELU forms (gelu_tanh), SDPA pinned to one
backend (sdpa) and the third-party kernel libraries run as peers (libraries). Not a family: the
registry never lists this package.
"""
