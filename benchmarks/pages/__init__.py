"""The renderers of every published figure, one module per page or figure family (benchmarks/render.py is
the command). Each reads committed JSON and returns Markdown; nothing is measured here."""
