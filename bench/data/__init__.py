"""Bundled data of the harness: the tinytext word list and the generator that turns it into a corpus."""
