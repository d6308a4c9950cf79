"""Floor 2, deterministic orchestration: no I/O, no clock, no randomness. Workflows import
``schemas`` and the SDK only, and name their activities (``schemas.names``).

Import each workflow from its own module. This package imports none of them: the workflow
sandbox runs the package and the workflow's module afresh for every run, so anything imported
here would be executed again for each execution.
"""
