"""The store's hand-written SQL, kept together: one module of named statements per dialect
(:mod:`.sqlite`, :mod:`.postgres`) over the fragments both share (:mod:`.shared`).

These are the statements that run for every message — intake, claims and a success's
transition — bound to a driver by :mod:`engine.store.hotpath`. Each state change they make
is spelled once per dialect; ``Completed`` in one statement (``COMPLETE``) with one guard:
the completion's claim still holds the message (its fencing token, and the message still
``Delivered``). SQLAlchemy Core keeps the schema, Alembic, the read models and the rarer
transitions (:mod:`engine.store.transitions`).
"""
