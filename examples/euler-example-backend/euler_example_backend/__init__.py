"""An example out-of-tree nanoeuler backend, installed as its own distribution (see plugin.py)."""
