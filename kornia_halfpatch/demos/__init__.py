"""Live before/after demonstrations, one module per fix, run by the CLI (never by apply())."""
