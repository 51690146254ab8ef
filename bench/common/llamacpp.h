/* bench/llamacpp.h: llama.cpp side by side, for the benchmarks. With LLAMA_BENCH=path/to/
 * llama-bench, the model is exported to GGUF with meshlm's own exporter (once, cached beside
 * the synthetic checkpoint), quantized with llama-quantize --pure (from $LLAMA_QUANTIZE or
 * llama-bench's folder) and measured with llama-bench on the same machine in the same run,
 * with flash attention off and on (the better figure of the two is kept).
 * llama.cpp is never built or shipped by this project. */
#ifndef MESHLM_BENCH_LLAMACPP_H
#define MESHLM_BENCH_LLAMACPP_H

#include <stdint.h>

typedef struct llamacpp_result {
    double decode_tps;        /* tg: tokens/s at batch 1 */
    double prefill_tps[16];   /* pp: tokens/s, one per prompt length asked for */
    double bytes_per_token;   /* weight bytes a decode step reads (all tensors but the
                                 embedding when an output tensor exists) */
    char path[1024];          /* the GGUF file measured */
    int ok;
} llamacpp_result;

/* Measures the model in DIR quantized to QTYPE ("Q8_0", "Q4_0"; "bf16" is the export itself)
 * with N_THREADS threads:
 * decode over N_GEN tokens and prefill at each of PREFILLS[0..N_PREFILLS). Returns ok = 0
 * (after a message on stderr) when anything is missing or fails. */
llamacpp_result llamacpp_measure(const char *dir, const char *qtype, int n_threads,
                                 const int *prefills, int n_prefills, int n_gen);

/* llama-bench's batch-1 decode of the GGUF file PATH with N_THREADS threads over N_GEN tokens
 * after a context of DEPTH tokens (-d), the better of flash attention off and on; 0 when it
 * fails. */
double llamacpp_decode(const char *path, int n_threads, int depth, int n_gen);

/* llama-batched-bench's aggregate decode (S_TG, tokens/s over all sequences) of N_SEQS
 * sequences of N_PROMPT prompt tokens each, N_GEN tokens each, on the GGUF file PATH with
 * N_THREADS threads ($LLAMA_BATCHED_BENCH, else next to llama-bench); 0 when it fails. */
double llamacpp_batched_decode(const char *path, int n_threads, int n_seqs, int n_prompt,
                               int n_gen);

#endif
