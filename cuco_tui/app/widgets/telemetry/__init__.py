"""Widgets that show what the GPUs are doing: the telemetry panel."""
