"""strata/dialects"""
