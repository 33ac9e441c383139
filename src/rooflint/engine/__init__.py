"""The measurement engine: planning a bench, worker processes, the timer, the correctness gate,
the environment record, CUDA builds, ceilings and profiling runs. It owns defaults and device checks."""
