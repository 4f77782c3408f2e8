"""The one way out: consumers, delivery tags and unacked entries."""
