"""memroute's built-in plugins. Each module is an ordinary plugin, registered through the same
``[project.entry-points.memroute]`` table a third party uses."""
