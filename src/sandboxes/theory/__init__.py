"""Exact theory of each chapter: closed forms, weight constructions and bounds. Nothing trains."""
