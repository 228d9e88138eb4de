"""strata/targets"""
