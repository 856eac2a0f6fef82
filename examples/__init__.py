"""Agents people copy from: the vendor-onboarding demo and its downstream systems."""
