"""Inside the training process: what runs in the child that repro-check starts.

The entry point (``python -m repro_check.child``) applies the seeding, installs the step recorder
and runs the user's target. Everything here reports to the parent through the trace stream and
never imports the parent's side (``run``, ``compare``, ``report``, ``cli``, ...).
"""
