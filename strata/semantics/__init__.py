"""strata/semantics"""
