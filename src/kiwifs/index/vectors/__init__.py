"""Vectors: embedders, chunking, the vector store and worker, semantic and hybrid search."""
