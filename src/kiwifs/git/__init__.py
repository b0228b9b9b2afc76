"""Git as the audit trail: the repository, the committer and its child, messages, history, trees,
replay and the index file.
"""
