"""Episodic memory: the pure rules, the full scan, and the frontmatter fast path."""
