"""The SQLite index: schema, upkeep, rows, the indexed report, search and /meta queries."""
