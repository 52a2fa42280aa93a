"""The pre-merge gate's golden traces: writing, checking and reading them (the ``record``,
``verify`` and ``diff`` commands in :mod:`repro_check.commands` use them)."""
