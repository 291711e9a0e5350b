"""Figures of each chapter, drawn from result data so quick and full runs plot the same way."""
