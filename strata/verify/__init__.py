"""Comparing Strata's values with references outside the project (llama.cpp's callback logs)."""
