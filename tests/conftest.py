import os

# Triton kernels run on CPU tensors through the interpreter. triton.jit reads this flag when a
# kernel is decorated, so it must be set before any family module is imported.
os.environ.setdefault("TRITON_INTERPRET", "1")
