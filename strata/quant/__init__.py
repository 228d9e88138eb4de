"""Quantization carried out: the passes decide (`strata.passes.smoothquant`, `quantize_w4a16`,
the blueprint's recipes), the modules here transform and write the weights: calibration ranges,
SmoothQuant's smoothing, int4 w4a16 stages, fp8 block checkpoints, random checkpoints."""
