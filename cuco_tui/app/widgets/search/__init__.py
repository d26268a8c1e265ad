"""Widgets of the search dashboard: state, proposals, evaluations in flight, the chart."""
