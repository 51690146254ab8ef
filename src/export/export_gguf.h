/* export/export_gguf.h: what the two halves of the GGUF export share (internal).
 * export_gguf.c writes the general and architecture keys and the tensors; export_gguf_vocab.c
 * writes the tokenizer keys. Both follow llama.cpp's convert_hf_to_gguf.py (key names, value
 * types, order, and which keys appear when), reading the same files it reads. */
#ifndef MESHLM_MODEL_EXPORT_GGUF_H
#define MESHLM_MODEL_EXPORT_GGUF_H

#include <jansson.h>

#include "format/gguf_writer.h"
#include "meshlm.h"

/* The model directory's JSON files, each NULL when absent. Owned by the export. */
typedef struct mlm_export_files {
    const char *dir;    /* borrowed */
    json_t *config;     /* config.json */
    json_t *generation; /* generation_config.json */
} mlm_export_files;

/* Writes the tokenizer keys (tokenizer.ggml.*, tokenizer.chat_template) for the tokenizer in
 * F->dir: tokenizer.json (preferred, as convert reads it), else vocab.json + merges.txt,
 * else a tiktoken tokenizer.model (Llama 3), with tokenizer_config.json, chat_template.jinja
 * and config.json's *_token_id as convert's SpecialVocab reads them. CFG gives the family
 * (the pre-tokenizer name) and vocab_size (ids the tokenizer lacks become "[PAD<id>]").
 * IO when there is no tokenizer, FORMAT for files convert would reject, UNSUPPORTED for a
 * pre-tokenizer llama.cpp has no name for. */
mlm_status mlm_export_vocab(mlm_gguf_writer *w, const mlm_export_files *f, const mlm_config *cfg,
                            mlm_error *err);

#endif
