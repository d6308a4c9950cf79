"""Runtime plumbing of Moat's processes: the Temporal connection and payload codec (with
the Web UI's codec door), observability, Temporal Schedules, owner-role database sessions
for operator commands, and the worker process around ``worker.py``."""
