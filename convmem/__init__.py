"""convmem: bounded session state and a durable conversation record."""
