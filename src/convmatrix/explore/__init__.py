"""Explore: find conv failures nobody has reported yet (docs/explore.md)."""
