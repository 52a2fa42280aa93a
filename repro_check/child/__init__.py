"""Inside the training process: what runs in the child that repro-check starts.

The entry point (``python -m repro_check.child``, :mod:`repro_check.child.main`) applies the
seeding, installs the features of the run through one interface (:mod:`repro_check.child.features`,
every hook going through the registry of :mod:`repro_check.child.patches`) and runs the user's
target. The modules are kept by role: ``process/`` (what starts and ends the run), ``seeding/``
(what seeds and pins it) and ``observe/`` (what observes it). Everything here reports to the
parent through the trace stream and never imports the parent's side (``run``, ``compare``,
``report``, ``cli``, ...); the vocabulary both sides share is in :mod:`repro_check.trace`.
"""
