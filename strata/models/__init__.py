"""strata/models"""
