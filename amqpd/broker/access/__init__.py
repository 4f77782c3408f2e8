"""Users, vhosts and permissions: a leaf that imports nothing of the broker."""
