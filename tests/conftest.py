import os
import signal
import warnings

import pytest

# Triton kernels run on CPU tensors through the interpreter. triton.jit reads this flag when a
# kernel is decorated, so it must be set before any family module is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")
# One OpenMP thread per process (torch reads this when it is imported; subprocesses inherit it).
# The suite runs two xdist workers on a 2-core runner, each with the bench or model processes it
# starts, so torch's default of one thread per core oversubscribes the cores, and a parallel op
# then waits for whichever of its threads is descheduled: a [2, 8, 64] layer norm took 8 ms
# instead of 8 us. The tests check results, never a speed-up from threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Inductor compiles in the process that asked, not in a pool of compile workers it would start in
# each process that compiles (the two xdist workers, and every bench, model or pytest process they
# start): each worker is a Python importing torch, seconds of a core the runner's other processes are
# waiting for, and what it compiles is the same either way. Read when torch._inductor is imported.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# A suite started as a background job of a shell without job control (`bash .ci/run &`, a script's
# `cmd &`) inherits SIGINT ignored, and so does every console the Ctrl-C tests start: they then run on
# through the signal and those tests fail. The tests run as a terminal's foreground job does.
try:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
except ValueError:  # imported off the main thread: as it was
    pass


def pytest_configure(config):
    # Where tests run (an xdist worker, or a run without workers): Triton's interpreter lists the
    # language's builtins once instead of on every @triton.jit call, and a kernel launch patches the
    # language once instead of again on each of its helpers' calls, and each Triton type's numpy dtype
    # is looked up once (tests/triton_interpreter.py).
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        import triton_interpreter

        triton_interpreter.list_builtins_once()
        triton_interpreter.patch_once_per_launch()
        triton_interpreter.np_dtypes_looked_up_once()


def _sigint_state():
    import signal

    return signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.fixture(autouse=True)
def _sigint_left_as_found(request):
    """The Ctrl-C tests start the console script and signal it; a child inherits an ignored SIGINT or
    a blocked one from the test process, and then runs on through the signal. In two slow full runs
    (never alone) every such test on one worker failed that way after some earlier test. A test that
    leaves SIGINT ignored, handled elsewhere or blocked gets it put back, with a warning naming it."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = _sigint_state()
    yield
    if _sigint_state() != before:
        signal.signal(signal.SIGINT, before[0])
        signal.pthread_sigmask(signal.SIG_SETMASK, before[1])
        warnings.warn(f"{request.node.nodeid} left SIGINT changed; put back for the tests after it", stacklevel=1)
