"""strata/targets/cpu"""
