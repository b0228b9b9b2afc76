"""The consolidation worker: its loop, its steps and the REST client it speaks through."""
