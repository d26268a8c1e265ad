"""Widgets, one a file, grouped by the area of the screen they serve."""
