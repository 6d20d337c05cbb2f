"""The Flower app: thin glue that carries the core server's and clients' messages between processes."""
