"""strata/ir"""
