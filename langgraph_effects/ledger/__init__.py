"""Ledgers: the protocol, the in-memory reference, SQLite (default) and PostgreSQL."""
