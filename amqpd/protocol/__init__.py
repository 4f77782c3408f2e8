"""The AMQP 0-9-1 protocol core: bytes in, frames and methods out, and back. No I/O here."""
