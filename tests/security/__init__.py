"""Security suite: hostile input, fuzzing from the OpenAPI documents, secrets, Redis auth/TLS."""
