"""The use cases Knowledge composes, and its wiring: the parts built and opened for a root
(wiring), file writes past the claims (filewrites), reads (reading), memory writes,
consolidation, integrity, briefs, history, and scaffolding a new root.
"""
