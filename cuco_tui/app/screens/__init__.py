"""Screens: the big modes of the app."""
