"""Executing a capability, one room per stage of the request, in the order a request meets
them (``front.Executions.execute`` walks them):

- ``auth``: who calls, the presented key verified (``keycache``: moments ago) before any
  work on the body;
- ``ingest``: the body parsed, validated and canonicalized, its key derived (``prepare``),
  its connection admitted;
- ``replay``: a repeat answered with its stored answer, from memory (``memory``) or from
  Postgres, counted as a hit (``hits``);
- ``flights``: identical copies in flight share one way through Postgres and Temporal;
- ``start``: the run started in Temporal, or the running one attached to;
- ``wait`` and ``results``: the run waited for within the budget, and what it comes to;
- ``status``: what became of an execution, for a poll.

What goes in and out is in ``call``. Persist-first: the only durable write for a new
request is starting the workflow. Answers are envelopes; refusals are ``MoatError`` with
the API's code. Nothing here speaks HTTP. What the rooms above use is exported by the
services' face, ``starter.service``.
"""
