"""Delivery: what happens to one message of one item — the dispatcher's claims, the workers'
attempts, what follows each attempt, and the guards around them."""
