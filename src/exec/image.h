/* exec/image.h: Llama 3.2 Vision's images in the executor (exec/image.c): the public mlm_image
 * (decoded, preprocessed, encoded), and the executor's image K/V pool (an mlm_kv of one block
 * per tile and one layer per cross-attention layer), the images each sequence holds, and the
 * view each token of a step gets of them. Internal to src/exec/. */
#ifndef MESHLM_EXEC_IMAGE_H
#define MESHLM_EXEC_IMAGE_H

#include "core/pool.h"
#include "kv/kv.h"
#include "meshlm.h"

/* The images of one sequence: image I at position POS[I], seen by the positions [POS[I],
 * ENDS[I]) (INT32_MAX: to the end), its tiles at blocks [TILE_OFF[I], TILE_OFF[I + 1]) of the
 * sequence's page table in the image pool. */
typedef struct seq_images {
    int32_t n;
    int32_t pos[MLM_MAX_IMAGES], ends[MLM_MAX_IMAGES], tile_off[MLM_MAX_IMAGES + 1];
    uint64_t ids[MLM_MAX_IMAGES]; /* hashes of the images' states: a sequence binding the same
                                     image (from any mlm_image) shares its K/V */
} seq_images;

/* For a vision model: the pool of P's image_tiles tiles (resolving 0 in P to max_seqs x
 * max_images x max tiles) and max_seqs empty seq_images in *IMAGES; for other models *IMAGES
 * is NULL and nothing is allocated. */
mlm_status mlm_exec_images_init(const mlm_model *model, mlm_exec_params *p, mlm_kv *xkv,
                                seq_images **images, mlm_error *err);
void mlm_exec_images_deinit(mlm_kv *xkv, seq_images *images);
/* Forgets sequence SEQ's images (their tiles return to the pool). */
void mlm_exec_images_reset(mlm_kv *xkv, seq_images *si, int32_t seq);
/* INVALID_ARG when token TOK at position POS of SEQ is the image token without an image
 * there, or another token where an image is bound. */
mlm_status mlm_exec_images_check(const seq_images *si, int32_t seq, int32_t tok, int32_t pos,
                                 int32_t image_token, mlm_error *err);
/* The image entries the token at POS reads: *BLOCKS the sequence's page table from the first
 * tile it sees, *N the entries (N_TOK a tile; 0: it sees none). */
void mlm_exec_images_view(const seq_images *si, const mlm_kv_seq *xs, int32_t pos, int32_t n_tok,
                          const int32_t **blocks, int32_t *n);
/* mlm_exec_seq_set_images: binds IMAGES at POS to SEQ of ALL (p->max_seqs sequences; SEQ's
 * next position is NEXT): an image another sequence holds shares its tile blocks, the others'
 * K/V are computed into new ones with the step's SCRATCH and POOL. */
mlm_status mlm_exec_images_bind(const mlm_model *model, const mlm_exec_params *p, mlm_kv *xkv,
                                seq_images *all, int32_t seq, int32_t next,
                                mlm_image *const *images, const int32_t *pos, int32_t n,
                                void *scratch, mlm_pool *pool, mlm_error *err);

#endif
