"""The model of the world: kernel families and their registry, cost models, GPU specs and ceilings,
and the roofline maths. Nothing here runs a kernel or prints to a terminal."""
