"""attnserve's own package: the bundle contract (attnserve.bundle) and the generated protocol (attnserve.v1, attnserve.inference)."""
