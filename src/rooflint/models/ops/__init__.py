"""Kernels that only whole models use: GPT-2's persistent decode-layers kernel (decode_layers.py) and
the greedy sampler (sample.py). They are built from the families' pieces but are no family: no
size, reference or cost of their own, so the registry never lists them.
"""
