"""Differential privacy for the federation: accounting (and, later, attacks and defences)."""
