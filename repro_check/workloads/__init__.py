"""Reference workloads that ship with repro-check and run offline."""
