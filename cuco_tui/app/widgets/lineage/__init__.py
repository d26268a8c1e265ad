"""Widgets of the lineage screen: the candidate DAG as a table, one candidate's details, and
the diff of two candidates' code."""
