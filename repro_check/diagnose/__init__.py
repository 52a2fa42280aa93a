"""Why runs diverge: op-level localization and the search of every source of a divergence (the
``diagnose`` and ``--across`` commands in :mod:`repro_check.commands` use them)."""
