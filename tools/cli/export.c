/* tools/cli/export.c: `meshlm export`: a model directory to a GGUF file for llama.cpp.
 * The default dtype follows convert_hf_to_gguf.py's "auto": the checkpoint's own dtype when
 * it is bf16 or f16 (bit-exact), f16 for f32 checkpoints. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(void) {
    printf("usage: meshlm export -m DIR --gguf OUT [--dtype auto|f16|bf16|f32]\n"
           "\n"
           "Writes the model in DIR (Hugging Face or Meta layout, with its tokenizer) as a\n"
           "GGUF file for llama.cpp, as llama.cpp's convert_hf_to_gguf.py would: architecture\n"
           "llama (Llama 3), phi3 (Phi-4), qwen2 (Qwen2, Qwen2.5) or qwen3 (Qwen3 dense), the\n"
           "tokenizer, chat template and hyper-parameters.\n"
           "The file is written under a temporary name and renamed when complete.\n"
           "\n"
           "  -m, --model DIR    model directory (config.json + *.safetensors, or params.json +\n"
           "                     consolidated.NN.pth), with tokenizer.json or tokenizer.model\n"
           "      --gguf OUT     the GGUF file to write (replaced if it exists)\n"
           "      --dtype T      matrices' type: auto (default: the checkpoint's bf16 or f16,\n"
           "                     which keeps every bit; f16 for f32 checkpoints), f16, bf16 or\n"
           "                     f32; norms are always f32\n"
           "  -h, --help         this help\n"
           "\n"
           "A bf16 checkpoint is streamed from its mapping; any other is held in f32 while\n"
           "writing (4 bytes of memory per parameter).\n");
}

/* convert's "auto": the dtype of the first matrix that is bf16 or f16; f16 when none is. */
static mlm_dtype auto_dtype(const char *dir) {
    mlm_checkpoint *ck;
    mlm_error err;
    mlm_dtype d = MLM_DTYPE_F16;
    if (mlm_checkpoint_open(dir, &ck, &err) != MLM_OK) return d;
    for (int64_t i = 0; i < mlm_checkpoint_n_tensors(ck); i++) {
        const mlm_tensor_view *t = mlm_checkpoint_tensor(ck, i);
        if (t->n_dim < 2 || (t->dtype != MLM_DTYPE_BF16 && t->dtype != MLM_DTYPE_F16)) continue;
        d = t->dtype;
        break;
    }
    mlm_checkpoint_free(ck);
    return d;
}

int cmd_export(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *dtype = "auto";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (tool_is_help(a)) {
            help();
            return TOOL_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = tool_value(argc, argv, &i)))
                return tool_usage("export", "%s needs a directory", a);
        } else if (!strcmp(a, "--gguf")) {
            if (!(out = tool_value(argc, argv, &i)))
                return tool_usage("export", "%s needs a path", a);
        } else if (!strcmp(a, "--dtype")) {
            if (!(dtype = tool_value(argc, argv, &i)))
                return tool_usage("export", "%s needs a value", a);
        } else {
            return tool_usage("export", "unknown argument '%s'", a);
        }
    }
    if (!model) return tool_usage("export", "-m DIR is required");
    if (!out) return tool_usage("export", "--gguf OUT is required");
    mlm_dtype d;
    if (!strcmp(dtype, "f16"))
        d = MLM_DTYPE_F16;
    else if (!strcmp(dtype, "bf16"))
        d = MLM_DTYPE_BF16;
    else if (!strcmp(dtype, "f32"))
        d = MLM_DTYPE_F32;
    else if (!strcmp(dtype, "auto"))
        d = auto_dtype(model);
    else
        return tool_usage("export", "--dtype must be auto, f16, bf16 or f32, not '%s'", dtype);
    double t0 = tool_now();
    mlm_error err;
    if (mlm_export_gguf(model, out, d, &err) != MLM_OK) return tool_fail(&err);
    fprintf(stderr, "meshlm export: wrote %s (%s) in %.1f s\n", out, mlm_dtype_name(d),
            tool_now() - t0);
    return TOOL_OK;
}
