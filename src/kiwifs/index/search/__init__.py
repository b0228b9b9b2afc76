"""Keyword search over the index: the query rule, BM25 ranking and its term columns, /meta queries
and feedback.
"""
