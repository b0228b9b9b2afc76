"""Memory answers kept fast by the index: check, lineage, overview, timeline and tasks."""
