// `-t trace` prints the op level as llama.cpp's eval-callback table (the ggml ops of llama.cpp's graph):
// one row per compute op in firing order, the ggml tensor name, the GGML op, the
// first two sources with their shapes, and the output shape, all in ggml order
// (fastest dimension first, padded to 4 dims). Views are named after their
// source ("Kcur-0 (view)", "... (permuted)"), unnamed nodes "node_<index>",
// unnamed leaves "leaf_<n>".

// RUN: strata-opt %S/../../passes/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill tokens=5 start=0 ctx=64 kv-pad=32 flash-attn=true}' -t trace | filecheck %s --check-prefix=FA
// RUN: strata-opt %S/../../passes/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=prefill tokens=5 start=0 ctx=64 kv-pad=32 flash-attn=false}' -t trace | filecheck %s --check-prefix=NOFA
// RUN: strata-opt %S/../../passes/Inputs/llama2l.mlir -p 'convert-module-to-op{entry=decode start=7 ctx=64 kv-pad=32 flash-attn=true}' -t trace | filecheck %s --check-prefix=DECODE

// The header, then the embedding lookup: token_embd.weight is [Vocab, H] =
// [32, 16] row-major, {16, 32} in ggml order.
// FA:      {{^}}llama.cpp eval-callback — ggml op level
// FA-NEXT: {{^}}| # | Tensor | Op | Operands | Output shape | |
// FA-NEXT: {{^}}|---|---|---|---|---|---|
// FA-NEXT: {{^}}| 1 | embd | GET_ROWS | token_embd.weight{16, 32, 1, 1} , inp_tokens{5, 1, 1, 1} | → | {16, 5, 1, 1} |
// FA-NEXT: {{^}}| 2 | norm-0 | RMS_NORM | embd{16, 5, 1, 1} | → | {16, 5, 1, 1} |
// FA-NEXT: {{^}}| 3 | attn_norm-0 | MUL | norm-0{16, 5, 1, 1} , blk.0.attn_norm.weight{16, 1, 1, 1} | → | {16, 5, 1, 1} |
// FA-NEXT: {{^}}| 4 | Qcur-0 | MUL_MAT | blk.0.attn_q.weight{16, 16, 1, 1} , attn_norm-0{16, 5, 1, 1} | → | {16, 5, 1, 1} |
// FA-NEXT: {{^}}| 5 | Qcur-0 | RESHAPE | Qcur-0{16, 5, 1, 1} | → | {4, 4, 5, 1} |
// FA-NEXT: {{^}}| 6 | Qcur-0 | ROPE | Qcur-0{4, 4, 5, 1} , leaf_{{[0-9]+}}{5, 1, 1, 1} | → | {4, 4, 5, 1} |

// The KV-cache writes: the flattened K (and V) rows into the [ctx, KvHeads*D] =
// {8, 64} cache; SET_ROWS lists the written rows and the row ids as its sources.
// FA:      {{^}}| 12 | Kcur-0 (view) | VIEW | Kcur-0{4, 2, 5, 1} | → | {8, 5, 1, 1} |
// FA-NEXT: {{^}}| 13 | cache_k_l0 (view) | SET_ROWS | Kcur-0 (view){8, 5, 1, 1} , leaf_{{[0-9]+}}{5, 1, 1, 1} | → | {8, 64, 1, 1} |
// FA-NEXT: {{^}}| 14 | Vcur-0 (view) | VIEW | Vcur-0{4, 2, 5, 1} | → | {8, 5, 1, 1} |
// FA-NEXT: {{^}}| 15 | cache_v_l0 (view) | SET_ROWS | Vcur-0 (view){8, 5, 1, 1} , leaf_{{[0-9]+}}{5, 1, 1, 1} | → | {8, 64, 1, 1} |

// Flash attention over the n_kv = 32 visible cache rows, then kqv_out.
// FA:      {{^}}| 18 | cache_k_l0 (view) | VIEW | cache_k_l0{8, 64, 1, 1} | → | {4, 2, 32, 1} |
// FA-NEXT: {{^}}| 19 | cache_k_l0 (view) (permuted) | PERMUTE | cache_k_l0 (view){4, 2, 32, 1} | → | {4, 32, 2, 1} |
// FA:      {{^}}| 22 | node_21 | FLASH_ATTN_EXT | Qcur-0 (view) (permuted){4, 5, 4, 1} , cache_k_l0 (view) (permuted){4, 32, 2, 1} | → | {4, 4, 5, 1} |
// FA-NEXT: {{^}}| 23 | kqv_out-0 | RESHAPE | node_21{4, 4, 5, 1} | → | {16, 5, 1, 1} |
// FA-NEXT: {{^}}| 24 | node_23 | MUL_MAT | blk.0.attn_output.weight{16, 16, 1, 1} , kqv_out-0{16, 5, 1, 1} | → | {16, 5, 1, 1} |
// FA:      {{^}}| 53 | node_52 | FLASH_ATTN_EXT | Qcur-1 (view) (permuted){4, 5, 4, 1} , cache_k_l1 (view) (permuted){4, 32, 2, 1} | → | {4, 4, 5, 1} |

// The last layer keeps only the output row: two GET_ROWS with the output ids.
// FA:      {{^}}| 55 | node_54 | MUL_MAT | blk.1.attn_output.weight{16, 16, 1, 1} , kqv_out-1{16, 5, 1, 1} | → | {16, 5, 1, 1} |
// FA-NEXT: {{^}}| 56 | node_55 | GET_ROWS | node_54{16, 5, 1, 1} , [[OUT_IDS:leaf_[0-9]+]]{1, 1, 1, 1} | → | {16, 1, 1, 1} |
// FA-NEXT: {{^}}| 57 | node_56 | GET_ROWS | l_out-0{16, 5, 1, 1} , [[OUT_IDS]]{1, 1, 1, 1} | → | {16, 1, 1, 1} |
// FA-NEXT: {{^}}| 58 | ffn_inp-1 | ADD | node_55{16, 1, 1, 1} , node_56{16, 1, 1, 1} | → | {16, 1, 1, 1} |

// The logits of that row.
// FA:      {{^}}| 66 | norm | RMS_NORM | l_out-1{16, 1, 1, 1} | → | {16, 1, 1, 1} |
// FA-NEXT: {{^}}| 67 | result_norm | MUL | norm{16, 1, 1, 1} , output_norm.weight{16, 1, 1, 1} | → | {16, 1, 1, 1} |
// FA-NEXT: {{^}}| 68 | result_output | MUL_MAT | output.weight{16, 32, 1, 1} , result_norm{16, 1, 1, 1} | → | {32, 1, 1, 1} |
// FA-NOT:  {{.}}

// Without flash attention: KQ, SOFT_MAX with the mask, V transposed and made
// contiguous, KQV, permuted back and made contiguous.
// NOFA-NOT: FLASH_ATTN_EXT
// (ggml's order: KQV's first source, V made contiguous, before its second, the softmax.)
// NOFA:      {{^}}| {{[0-9]+}} | cache_v_l1 (view) (permuted) (transposed) | TRANSPOSE | cache_v_l1 (view) (permuted){4, 32, 2, 1} | → | {32, 4, 2, 1} |
// NOFA-NEXT: {{^}}| {{[0-9]+}} | cache_v_l1 (view) (permuted) (transposed) (cont) | CONT | cache_v_l1 (view) (permuted) (transposed){32, 4, 2, 1} | → | {32, 4, 2, 1} |
// NOFA:      {{^}}| {{[0-9]+}} | kq-1 | MUL_MAT | cache_k_l1 (view) (permuted){4, 32, 2, 1} , Qcur-1 (view) (permuted){4, 5, 4, 1} | → | {32, 5, 4, 1} |
// NOFA-NEXT: {{^}}| {{[0-9]+}} | kq_soft_max-1 | SOFT_MAX | kq-1{32, 5, 4, 1} , leaf_{{[0-9]+}}{32, 5, 1, 1} | → | {32, 5, 4, 1} |
// NOFA-NEXT: {{^}}| {{[0-9]+}} | kqv-1 | MUL_MAT | cache_v_l1 (view) (permuted) (transposed) (cont){32, 4, 2, 1} , kq_soft_max-1{32, 5, 4, 1} | → | {4, 5, 4, 1} |
// NOFA-NEXT: {{^}}| {{[0-9]+}} | kqv-1 (permuted) | PERMUTE | kqv-1{4, 5, 4, 1} | → | {4, 4, 5, 1} |
// NOFA-NEXT: {{^}}| {{[0-9]+}} | kqv_out-1 | CONT | kqv-1 (permuted){4, 4, 5, 1} | → | {16, 5, 1, 1} |
// NOFA:      {{^}}| {{[0-9]+}} | result_output | MUL_MAT | output.weight{16, 32, 1, 1} , result_norm{16, 1, 1, 1} | → | {32, 1, 1, 1} |

// Decode: one row everywhere and no GET_ROWS but the embedding lookup.
// DECODE:      {{^}}| 1 | embd | GET_ROWS | token_embd.weight{16, 32, 1, 1} , inp_tokens{1, 1, 1, 1} | → | {16, 1, 1, 1} |
// DECODE-NOT:  GET_ROWS
// DECODE:      {{^}}| {{[0-9]+}} | cache_k_l1 (view) | SET_ROWS | Kcur-1 (view){8, 1, 1, 1} , leaf_{{[0-9]+}}{1, 1, 1, 1} | → | {8, 64, 1, 1} |
// DECODE-NOT:  GET_ROWS
// DECODE:      {{^}}| {{[0-9]+}} | node_{{[0-9]+}} | FLASH_ATTN_EXT | Qcur-1 (view) (permuted){4, 1, 4, 1} , cache_k_l1 (view) (permuted){4, 32, 2, 1} | → | {4, 4, 1, 1} |
// DECODE-NOT:  GET_ROWS
// DECODE:      {{^}}| {{[0-9]+}} | result_output | MUL_MAT | output.weight{16, 32, 1, 1} , result_norm{16, 1, 1, 1} | → | {32, 1, 1, 1} |
