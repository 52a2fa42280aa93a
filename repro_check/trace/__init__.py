"""What both sides share: the trace format, exact value encodings, fingerprints, atomic files."""
