"""The REST interface: routes (app) and HTTP plumbing (http)."""
