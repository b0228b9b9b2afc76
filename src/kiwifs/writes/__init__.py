"""The write path: one pipeline for single and bulk writes, its journal, recovery, locks,
preconditions and change events.
"""
