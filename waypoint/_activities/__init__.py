"""The only place that does I/O: model calls, tool execution, loading agent specs."""
