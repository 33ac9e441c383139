"""CLI commands beyond bench/list/specs/roofline, one module each, registered in rooflint.cli."""
