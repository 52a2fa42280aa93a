"""What seeds and pins a run: the seeding components, the RNG states of the per-step signals, the
moved clock, diagnose's pins and private generators, the negative control's plant, and what an
``--across`` environment imposes."""
