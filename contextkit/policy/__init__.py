"""Pure history policies: plain functions over message lists, no IO, no clock, no randomness."""
