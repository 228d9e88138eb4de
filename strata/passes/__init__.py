"""strata/passes"""
