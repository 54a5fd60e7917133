"""Adapters that plug engram into other frameworks (each needs its optional extra)."""
