"""Optimizations registered by id."""
from __future__ import annotations

REGISTRY: dict = {}


def register(cls):
    instance = cls()
    REGISTRY[instance.id] = instance
    return cls
