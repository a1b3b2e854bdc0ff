"""resbench harness: `python -m bench`."""
