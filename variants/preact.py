"""Placeholder: family not yet written."""
