"""The commands, one module each (check, record, verify, diff, diagnose, across, resume,
bisect), every one of them a plan, its runs, their comparison and the report built of its parts;
the command line (:mod:`repro_check.cli`) and the API (:mod:`repro_check.api`) call them."""
