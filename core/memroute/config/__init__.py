"""Configuration: settings and their sources (:mod:`~memroute.config.settings`), the one cattrs converter
(:mod:`~memroute.config.serialization`), input limits (:mod:`~memroute.config.limits`) and the outbound SSRF
guard (:mod:`~memroute.config.netguard`)."""
