"""Client tools, apart from the server: attnserve-client, heat maps, the replica-balancing service
config and the health checker containers run."""
