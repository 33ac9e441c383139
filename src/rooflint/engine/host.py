"""The machine's name every row records in its host column."""

from __future__ import annotations

import os
import socket

# Where the hostname is not the machine's name (a Kubernetes pod's is the pod's), the environment
# names it: one variable for every run, plain or fleet, so a machine's rows never carry two names.
HOST_VARIABLE = "ROOFLINT_HOST"


def host_name() -> str:
    """$ROOFLINT_HOST where set and not empty, else the hostname."""
    return os.environ.get(HOST_VARIABLE, "").strip() or socket.gethostname()
