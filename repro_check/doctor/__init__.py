"""Hazards found without running: the source scanner, its codes and the environment table."""
