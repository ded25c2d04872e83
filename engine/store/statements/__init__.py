"""The hand-written SQL of the hot path: named statements per dialect over shared fragments."""
