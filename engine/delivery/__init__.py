"""Delivery: one item's dispatcher, workers, attempts and the middleware around them."""
