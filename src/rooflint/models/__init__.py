"""Whole models: a model's roofline op by op, and rooflint's kernels inside it (`rooflint model`).

One module per architecture (gpt2.py, llama.py) implements rooflint.models.base.ModelSpec; catalog.py lists
them. Imports nothing heavy here: transformers loads only when a model is built.
"""
