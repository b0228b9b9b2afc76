"""The knowledge root on disk: storage, atomic writes, folder sync, the tree, the server lock."""
