"""Sources that `rooflint new-family NAME` copies, with ``my_family`` replaced by NAME.

``my_family.py`` is vector_add written as a starting point (sizes, inputs, float64 reference, cost,
an eager baseline, a compile and a Triton variant); ``my_family_checks.py`` becomes its
``test_NAME.py``. Both are real modules, linted with the rest of rooflint, so what new-family writes
is known to work. The family starts as one module, which the registry loads as it loads a package
family (``kernels/<family>/``: ``__init__`` plus one module per implementation and the ``.cu``
beside them); my_family.py's docstring says how to grow it into one. A subpackage in the registry's
RESERVED set, so it is not listed as a family.
"""
