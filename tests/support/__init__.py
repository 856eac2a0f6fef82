"""Helpers several test modules share: openings, checks and fixtures that would be written again."""
