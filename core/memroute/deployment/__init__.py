"""What one deployment shares between its processes: SQLite connections (:mod:`~memroute.deployment.db`), the
state store (:mod:`~memroute.deployment.state`), API keys (:mod:`~memroute.deployment.keys`), the storage protocol
another process's ``http`` backend speaks to (:mod:`~memroute.deployment.storage_api`), and the group commit that
batches concurrent writes (:mod:`~memroute.deployment.group_commit`)."""
