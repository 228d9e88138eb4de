"""Exporters: the op level as llama.cpp's trace table, the module level as a seed-003 listing."""
