"""Outputs: the result schema and its CSV/JSON codec and writer, merging result files, roofline
plots, reports (Markdown, HTML, JSON) and JUnit XML."""
