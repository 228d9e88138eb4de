"""Exporters: the op level as llama.cpp's trace table, the module level as a listing of its entries and blocks, the
blueprint level as kbp-graph/v1 JSON (`kbp_graph`), a Graphviz digraph (`blueprint_dot`) and a
group table (`blueprint_table`); strata-opt's targets `trace`, `kbp-graph`, `blueprint-dot`,
`blueprint-table`."""
