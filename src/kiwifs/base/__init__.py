"""Leaf helpers every layer may use: paths, file walks, text, limits, forking, JSON."""
