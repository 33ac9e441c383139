"""Sources that `rooflint new-family NAME` copies, with ``my_family`` replaced by NAME.

``my_family.py`` is vector_add written as a starting point (sizes, inputs, float64 reference, cost,
an eager baseline, a compile and a Triton variant); ``my_family_checks.py`` becomes its
``test_NAME.py``. Both are real modules, linted with the rest of rooflint, so what new-family writes
is known to work. A subpackage, so the registry does not list it as a family.
"""
