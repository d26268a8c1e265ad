"""Widgets of the candidate view: one candidate of a session in tabs (source, diffs, errors,
deadlock, verification, timings, logs), and the export of its files."""
