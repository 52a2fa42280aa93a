"""The pre-merge gate: golden traces, ``record``, ``verify`` and ``diff``."""
