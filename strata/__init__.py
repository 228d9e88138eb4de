"""strata"""
