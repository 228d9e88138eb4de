"""strata/frontends"""
