"""The routing room: the :class:`~memroute.routing.manager.MemoryManager` sends every call to the primary backend
and, when it fails, to the ordered fallbacks.

- :mod:`~memroute.routing.manager`: the manager itself (per-operation routing, the ordering rule).
- :mod:`~memroute.routing.calls`: one guarded call to one backend (breaker, timeouts, the runner).
- :mod:`~memroute.routing.replication` and :mod:`~memroute.routing.outbox`: writes replicated to fallbacks
  through a durable, FIFO-per-target journal.
- :mod:`~memroute.routing.breaker`, :mod:`~memroute.routing.health`: circuit breakers and scheduled probes.
- :mod:`~memroute.routing.runner`: the bounded thread pool backend calls run on.
- :mod:`~memroute.routing.access`: access telemetry (counts and last-access times) written behind the reads.
- :mod:`~memroute.routing.verify`: the drift check between the primary and each fallback.
"""
