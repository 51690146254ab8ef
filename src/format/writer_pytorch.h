/* format/writer_pytorch.h: a streaming writer of torch.save zip files holding a flat state
 * dict of contiguous tensors (Meta consolidated.NN.pth). Layout as torch 2.x writes it
 * (models.md 7.1): <archive>/data.pkl (protocol 2: collections.OrderedDict,
 * torch._utils._rebuild_tensor_v2, torch.<X>Storage persistent ids; byte-identical to
 * torch's for such dicts), .format_version, .storage_alignment, byteorder, data/0..N-1
 * (one storage per tensor, 64-byte aligned through the 'FB' padding extra field), version;
 * STORED entries with data descriptors (flag 0x0808), CRC-32, central directory, and ZIP64
 * records (always the ZIP64 end record + locator, like torch; ZIP64 extra fields where an
 * offset or size reaches 4 GiB). Torch's per-save random .data/serialization_id is left
 * out so that files are byte-deterministic. The file is written atomically (see
 * writer_safetensors.h). */
#ifndef MESHLM_FORMAT_WRITER_PYTORCH_H
#define MESHLM_FORMAT_WRITER_PYTORCH_H

#include "format/writer_safetensors.h"

typedef struct mlm_pytorch_writer mlm_pytorch_writer;

/* Plans PATH for the state dict TENSORS (in this order; storage keys "0".."N-1"). The
 * archive folder is PATH's basename without its last extension, as torch.save names it
 * ("consolidated.00.pth" -> "consolidated.00/"). Nothing is written yet. The specs are
 * copied, their names borrowed. INVALID_ARG for a bad spec or a dtype torch has no storage
 * class for. */
mlm_status mlm_pytorch_writer_create(const char *path, const mlm_tensor_spec *tensors, int64_t n,
                                     mlm_pytorch_writer **out, mlm_error *err);
/* The file's size in bytes. */
uint64_t mlm_pytorch_writer_total_bytes(const mlm_pytorch_writer *w);
/* Appends the next N bytes of tensor data, in tensor order; pieces may span tensors. */
mlm_status mlm_pytorch_writer_write(mlm_pytorch_writer *w, const void *data, size_t n,
                                    mlm_error *err);
uint64_t mlm_pytorch_writer_written(const mlm_pytorch_writer *w);
/* Checks that every tensor byte was given, writes the central directory and end records,
 * fsyncs. The file keeps its temporary name until commit. */
mlm_status mlm_pytorch_writer_finish(mlm_pytorch_writer *w, mlm_error *err);
mlm_status mlm_pytorch_writer_commit(mlm_pytorch_writer *w, mlm_error *err);
/* Frees the writer; an uncommitted file is removed. */
void mlm_pytorch_writer_free(mlm_pytorch_writer *w);

#endif
