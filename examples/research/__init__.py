"""A research agent that uses Claude's own web search: offline, the scripted model plays it."""
