"""strata/verify"""
