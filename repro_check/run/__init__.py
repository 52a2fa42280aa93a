"""The parent side of a run: options, specs and results, the runner, process groups, and the one
session that runs a target and compares its runs."""
