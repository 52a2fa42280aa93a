"""How a run ends: the exit statuses the child uses to tell the parent what happened.

They are part of the protocol between the two sides; the parent reads them, the child sets them.
"""

from __future__ import annotations

#: exit status of a run whose target could not be resolved
EXIT_RESOLVE = 97
#: exit status of a run whose target raised
EXIT_RAISED = 98
#: exit status of a run stopped by SIGTERM from the runner
EXIT_TERMINATED = 99
#: exit status of a run whose runner was already gone when it started
EXIT_ORPHANED = 96
#: exit status of a run whose target closed or replaced the trace channel (what it recorded
#: after that could not be handed over)
EXIT_CHANNEL = 95
#: exit status of a run that refused its configuration: another version of the trace format (an
#: interpreter that imports another repro-check), or a broken one; the reason is on its stderr
EXIT_PROTOCOL = 94
#: the message of a run that ended with :data:`EXIT_PROTOCOL` (its reason follows)
PROTOCOL_MESSAGE = "the run refused its configuration"
#: the message of a run that ended with :data:`EXIT_CHANNEL`
CHANNEL_MESSAGE = ("the target closed or reused the file descriptor repro-check records the run "
                   "through (e.g. os.closerange or dup2 over it): the run could not be recorded")
