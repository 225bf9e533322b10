"""Client tools, apart from the server: attnserve-client, heat maps, the replica-balancing service
config, the health checker containers run, and phonemize() for code that calls phonemizer."""
