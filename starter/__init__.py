"""Floor 3: how work enters Moat and is inspected. Rooms: ``cli`` (the ``moat`` command),
``gateway`` (the HTTP API), ``devstack`` (``moat up``), ``service`` (the domain rules they
share) and ``runtime`` (plumbing); the agents' client is a distribution of its own. Each
room may import only the rooms below it; import-linter checks it (``make lint``)."""
