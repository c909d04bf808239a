"""The built-in backends. Each registers through the `nanoeuler.backends` entry-point group, exactly
as a backend from another distribution would."""
