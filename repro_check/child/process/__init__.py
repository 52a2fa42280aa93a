"""What starts and ends a run: the trace channel it writes to, the check that it runs its own
revision's code, the rank recorder and supervisor under torchrun, and the processes the target
starts (each recording a stream of its own)."""
