"""The use cases Knowledge composes: memory writes, consolidation, integrity, briefs, history and
scaffolding a new root.
"""
