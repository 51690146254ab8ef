/* format/gguf_quants.c: scalar dequantization of ggml tensor types, bit for bit as gguf-py's
 * gguf.quants.dequantize (see gguf_quants.h for the list of types).
 * gguf-py works in float32 numpy arrays: f16 scales widened exactly, integer codes and
 * sub-scales converted to float, then one float32 op per step: d * q, (d * q) + m, or
 * (d * sc) * q - dmin * m. Each step here is its own statement, in the same order. Every
 * product is exact in float32 (an 11-bit f16 significand times integers of at most 12 bits
 * together, Q6_K's 7-bit scale and 5-bit code being the widest; f16 subnormals are f32
 * normals), so only the final add or subtract rounds, and neither the order of a product nor
 * an fma contraction could change a result. The sign of a zero does depend on the ops: the
 * offset comes off the code before the multiply (d * (q - 8), never d * q - 8 * d).
 * Block fields are byte arrays read little-endian, so blocks may sit at any address. No
 * allocation, no state: safe to call from any thread. */
#include "format/gguf_quants.h"

#include <string.h>

#include "tensor/dtype.h"
#include "tensor/wtype.h"
#include "tensor/qpanel.h"

#define QK 32    /* elements per block of the 32-element types */
#define QK_K 256 /* elements per super-block of the k-quants */

// ---- block layouts (ggml-common.h) ----

typedef struct {
    uint8_t d[2];       /* f16 delta */
    uint8_t qs[QK / 2]; /* element i in the low nibble of qs[i], i + 16 in the high one */
} block_q4_0;
_Static_assert(sizeof(block_q4_0) == 18, "q4_0 block is 18 bytes");

typedef struct {
    uint8_t d[2]; /* f16 delta */
    uint8_t m[2]; /* f16 min */
    uint8_t qs[QK / 2];
} block_q4_1;
_Static_assert(sizeof(block_q4_1) == 20, "q4_1 block is 20 bytes");

typedef struct {
    uint8_t d[2];  /* f16 delta */
    uint8_t qh[4]; /* bit i of this little-endian u32: the fifth bit of element i */
    uint8_t qs[QK / 2];
} block_q5_0;
_Static_assert(sizeof(block_q5_0) == 22, "q5_0 block is 22 bytes");

typedef struct {
    uint8_t d[2]; /* f16 delta */
    uint8_t m[2]; /* f16 min */
    uint8_t qh[4];
    uint8_t qs[QK / 2];
} block_q5_1;
_Static_assert(sizeof(block_q5_1) == 24, "q5_1 block is 24 bytes");

typedef struct {
    uint8_t d[2]; /* f16 delta */
    int8_t qs[QK];
} block_q8_0;
_Static_assert(sizeof(block_q8_0) == 34, "q8_0 block is 34 bytes");

typedef struct {
    uint8_t scales[QK_K / 16]; /* per 16 elements: low nibble scale, high nibble min */
    uint8_t qs[QK_K / 4];      /* 2-bit codes, four planes of 32 per 128 elements */
    uint8_t d[2];              /* f16 scale of the scales */
    uint8_t dmin[2];           /* f16 scale of the mins */
} block_q2_K;
_Static_assert(sizeof(block_q2_K) == 84, "q2_K block is 84 bytes");

typedef struct {
    uint8_t hmask[QK_K / 8]; /* third bit (inverted offset), eight planes of 32 */
    uint8_t qs[QK_K / 4];    /* low 2 bits, as in q2_K */
    uint8_t scales[12];      /* sixteen 6-bit scales, offset by 32 */
    uint8_t d[2];            /* f16 scale of the scales */
} block_q3_K;
_Static_assert(sizeof(block_q3_K) == 110, "q3_K block is 110 bytes");

typedef struct {
    uint8_t d[2];       /* f16 scale of the scales */
    uint8_t dmin[2];    /* f16 scale of the mins */
    uint8_t scales[12]; /* eight 6-bit scales and eight 6-bit mins */
    uint8_t qs[QK_K / 2];
} block_q4_K;
_Static_assert(sizeof(block_q4_K) == 144, "q4_K block is 144 bytes");

typedef struct {
    uint8_t d[2];
    uint8_t dmin[2];
    uint8_t scales[12];   /* as q4_K */
    uint8_t qh[QK_K / 8]; /* fifth bit, eight planes of 32 */
    uint8_t qs[QK_K / 2]; /* low 4 bits, as q4_K */
} block_q5_K;
_Static_assert(sizeof(block_q5_K) == 176, "q5_K block is 176 bytes");

typedef struct {
    uint8_t ql[QK_K / 2];     /* low 4 bits */
    uint8_t qh[QK_K / 4];     /* high 2 bits */
    int8_t scales[QK_K / 16]; /* per 16 elements */
    uint8_t d[2];             /* f16 scale of the scales */
} block_q6_K;
_Static_assert(sizeof(block_q6_K) == 210, "q6_K block is 210 bytes");

typedef struct {
    uint8_t d[2];       /* f16 delta */
    uint8_t qs[QK / 2]; /* table indices, as q4_0's codes */
} block_iq4_nl;
_Static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl block is 18 bytes");

typedef struct {
    uint8_t d[2];             /* f16 scale of the scales */
    uint8_t scales_h[2];      /* little-endian u16: bits 2s..2s+1 the high bits of scale s */
    uint8_t scales_l[QK_K / 64]; /* nibble s % 2 of byte s / 2: the low bits of scale s */
    uint8_t qs[QK_K / 2];     /* sub-block s: 16 bytes, as iq4_nl's */
} block_iq4_xs;
_Static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs block is 136 bytes");

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static inline uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline float f16_at(const uint8_t *p) { return mlm_f16_to_f32(le16(p)); }

// ---- plain floats ----

static void dequant_f32(const uint8_t *src, int64_t n, float *dst) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = le32(src + 4 * i);
        memcpy(&dst[i], &u, 4);
    }
}

/* numpy's float16 -> float32 keeps NaN payloads (a signalling NaN stays signalling), as
 * mlm_f16_to_f32 does. */
static void dequant_f16(const uint8_t *src, int64_t n, float *dst) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = f16_at(src + 2 * i);
}

static void dequant_bf16(const uint8_t *src, int64_t n, float *dst) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = mlm_bf16_to_f32(le16(src + 2 * i));
}

// ---- blocks of 32 ----

/* Codes U of the 32 elements of a q4_0-style byte array QS (element j low nibble of qs[j],
 * j + 16 its high nibble), with a fifth bit from QH when given (bit j of the u32). */
static void nibbles(const uint8_t *qs, const uint8_t *qh, uint8_t u[32]) {
    uint32_t h = qh ? le32(qh) : 0;
    for (int j = 0; j < 16; j++) {
        u[j] = (uint8_t)((qs[j] & 0x0f) | ((h >> j) & 1) << 4);
        u[j + 16] = (uint8_t)((qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4);
    }
}

/* y = d * (q - 8) */
static void dequant_q4_0(const block_q4_0 *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK) {
        float d = f16_at(b->d);
        uint8_t u[QK];
        nibbles(b->qs, NULL, u);
        for (int j = 0; j < QK; j++) y[j] = d * (float)(u[j] - 8);
    }
}

/* y = (d * q) + m: the product is exact, the add rounds */
static void dequant_q4_1(const block_q4_1 *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK) {
        float d = f16_at(b->d), m = f16_at(b->m);
        uint8_t u[QK];
        nibbles(b->qs, NULL, u);
        for (int j = 0; j < QK; j++) {
            float p = d * (float)u[j];
            y[j] = p + m;
        }
    }
}

/* y = d * (q - 16), q = low nibble | fifth bit << 4 */
static void dequant_q5_0(const block_q5_0 *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK) {
        float d = f16_at(b->d);
        uint8_t u[QK];
        nibbles(b->qs, b->qh, u);
        for (int j = 0; j < QK; j++) y[j] = d * (float)(u[j] - 16);
    }
}

/* y = (d * q) + m */
static void dequant_q5_1(const block_q5_1 *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK) {
        float d = f16_at(b->d), m = f16_at(b->m);
        uint8_t u[QK];
        nibbles(b->qs, b->qh, u);
        for (int j = 0; j < QK; j++) {
            float p = d * (float)u[j];
            y[j] = p + m;
        }
    }
}

/* y = q * d */
static void dequant_q8_0(const block_q8_0 *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK) {
        float d = f16_at(b->d);
        for (int j = 0; j < QK; j++)
            y[j] = (float)b->qs[j] * d;
    }
}

// ---- k-quants (super-blocks of 256) ----

/* Element l of plane j (0..3) in a 128-element half: 2 bits of qs[l] at shift 2j, so element
 * index h * 128 + j * 32 + l reads qs[h * 32 + l]. Sub-block scale index = element / 16. */
static void dequant_q2_K(const block_q2_K *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        float d = f16_at(b->d), dmin = f16_at(b->dmin);
        float dl[QK_K / 16], ml[QK_K / 16];
        for (int s = 0; s < QK_K / 16; s++) {
            dl[s] = d * (float)(b->scales[s] & 0x0f);
            ml[s] = dmin * (float)(b->scales[s] >> 4);
        }
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) {
                    int e = h * 128 + j * 32 + l;
                    int q = (b->qs[h * 32 + l] >> (2 * j)) & 3;
                    float p = dl[e / 16] * (float)q;
                    y[e] = p - ml[e / 16];
                }
    }
}

/* Scales: the low 4 bits of scale s are nibble s / 8 of scales[s % 8], the high 2 bits are
 * bits 2 * (s / 4) of scales[8 + s % 4]; value - 32. Codes: 2 low bits as q2_K, minus 4
 * where the hmask bit (plane e / 32 of hmask[e % 32]) is clear. y = (d * scale) * q. */
static void dequant_q3_K(const block_q3_K *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        float d = f16_at(b->d);
        float dl[QK_K / 16];
        for (int s = 0; s < QK_K / 16; s++) {
            int lo = (b->scales[s % 8] >> (4 * (s / 8))) & 0x0f;
            int hi = (b->scales[8 + s % 4] >> (2 * (s / 4))) & 0x03;
            dl[s] = d * (float)((lo | hi << 4) - 32);
        }
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 32; l++) {
                    int e = h * 128 + j * 32 + l;
                    int q = (b->qs[h * 32 + l] >> (2 * j)) & 3;
                    int m = (b->hmask[l] >> (e / 32)) & 1;
                    y[e] = dl[e / 16] * (float)(q - (m ? 0 : 4));
                }
    }
}

/* The 12 bytes hold eight 6-bit scales and mins (ggml's get_scale_min_k4): sub-blocks 0..3
 * in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); 4..7 in the nibbles of bytes
 * 8..11 with their top 2 bits in the top bits of bytes 0..3 / 4..7. */
static void scale_min_k4(const uint8_t *q, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0x0f) | ((q[j] >> 2) & 0x30));
        mn[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 2) & 0x30));
    }
}

/* The codes U of sub-block S (32 elements) of a q4_K / q5_K super-block: nibble s % 2 of
 * qs[(s / 2) * 32 + l], with q5_K's fifth bit in bit s of qh[l] (QH NULL for q4_K). */
static void k_codes(const uint8_t *qs, const uint8_t *qh, int s, uint8_t u[32]) {
    for (int l = 0; l < 32; l++) {
        int lo = (qs[(s / 2) * 32 + l] >> (4 * (s % 2))) & 0x0f;
        u[l] = (uint8_t)(lo | (qh ? ((qh[l] >> s) & 1) << 4 : 0));
    }
}

/* y = (d*sc)*q - dmin*m, per sub-block of 32. */
static void dequant_q4_K(const block_q4_K *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        float d = f16_at(b->d), dmin = f16_at(b->dmin);
        uint8_t sc[8], mn[8];
        scale_min_k4(b->scales, sc, mn);
        for (int s = 0; s < 8; s++) {
            float ds = d * (float)sc[s];
            float dm = dmin * (float)mn[s];
            uint8_t u[32];
            k_codes(b->qs, NULL, s, u);
            for (int l = 0; l < 32; l++) {
                float p = ds * (float)u[l];
                y[s * 32 + l] = p - dm;
            }
        }
    }
}

/* As q4_K, with the fifth bit of sub-block s in bit s of qh[l]. */
static void dequant_q5_K(const block_q5_K *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        float d = f16_at(b->d), dmin = f16_at(b->dmin);
        uint8_t sc[8], mn[8];
        scale_min_k4(b->scales, sc, mn);
        for (int s = 0; s < 8; s++) {
            float ds = d * (float)sc[s];
            float dm = dmin * (float)mn[s];
            uint8_t u[32];
            k_codes(b->qs, b->qh, s, u);
            for (int l = 0; l < 32; l++) {
                float p = ds * (float)u[l];
                y[s * 32 + l] = p - dm;
            }
        }
    }
}

/* The 6-bit codes U of sub-block S (elements e = 32s + l) of a q6_K super-block: with
 * e = h * 128 + r, the low 4 bits are nibble r / 64 of ql[h * 64 + r % 64], the high 2 bits
 * bits 2 * (r / 32) of qh[h * 32 + r % 32]. */
static void q6_codes(const block_q6_K *b, int s, uint8_t u[32]) {
    for (int l = 0; l < 32; l++) {
        int e = 32 * s + l, h = e / 128, r = e % 128;
        int lo = (b->ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
        int hi = (b->qh[h * 32 + r % 32] >> (2 * (r / 32))) & 0x03;
        u[l] = (uint8_t)(lo | hi << 4);
    }
}

/* y = (d * scales[e / 16]) * (q - 32). */
static void dequant_q6_K(const block_q6_K *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        float d = f16_at(b->d);
        float dl[QK_K / 16];
        for (int s = 0; s < QK_K / 16; s++)
            dl[s] = d * (float)b->scales[s];
        for (int s = 0; s < QK_K / 32; s++) {
            uint8_t u[32];
            q6_codes(b, s, u);
            for (int l = 0; l < 32; l++) y[32 * s + l] = dl[(32 * s + l) / 16] * (float)(u[l] - 32);
        }
    }
}

// ---- non-linear 4-bit ----

/* y = d * kv[q] */
static void dequant_iq4_nl(const block_iq4_nl *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK) {
        float d = f16_at(b->d);
        uint8_t u[QK];
        nibbles(b->qs, NULL, u);
        for (int j = 0; j < QK; j++) y[j] = d * (float)mlm_iq4_values[u[j]];
    }
}

/* Sub-block S's scale ls - 32: the 6-bit ls from nibble s % 2 of scales_l[s / 2] and bits
 * 2s..2s+1 of scales_h. */
static int iq4_xs_scale(const block_iq4_xs *b, int s) {
    int ls = ((b->scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | ((le16(b->scales_h) >> (2 * s)) & 3) << 4;
    return ls - 32;
}

/* Sub-block s: dl = d * (ls - 32); y = dl * kv[q], the codes as iq4_nl's. */
static void dequant_iq4_xs(const block_iq4_xs *b, int64_t nb, float *y) {
    for (int64_t i = 0; i < nb; i++, b++) {
        float d = f16_at(b->d);
        for (int s = 0; s < QK_K / 32; s++, y += 32) {
            float dl = d * (float)iq4_xs_scale(b, s);
            uint8_t u[32];
            nibbles(b->qs + 16 * s, NULL, u);
            for (int j = 0; j < 32; j++) y[j] = dl * (float)mlm_iq4_values[u[j]];
        }
    }
}

// ---- dispatch ----

// ---- native panels ----

/* The ggml type of each native kind (tensor/qpanel.h's order). */
static const uint32_t qkind_type[MLM_QK_COUNT] = {
    [MLM_QK_Q8_0] = MLM_GGML_T_Q8_0, [MLM_QK_Q4_0] = MLM_GGML_T_Q4_0,
    [MLM_QK_Q4_1] = MLM_GGML_T_Q4_1, [MLM_QK_Q5_0] = MLM_GGML_T_Q5_0,
    [MLM_QK_Q5_1] = MLM_GGML_T_Q5_1, [MLM_QK_Q4_K] = MLM_GGML_T_Q4_K,
    [MLM_QK_Q5_K] = MLM_GGML_T_Q5_K, [MLM_QK_Q6_K] = MLM_GGML_T_Q6_K,
    [MLM_QK_IQ4_NL] = MLM_GGML_T_IQ4_NL, [MLM_QK_IQ4_XS] = MLM_GGML_T_IQ4_XS,
};

int mlm_ggml_qkind(uint32_t type) {
    for (int k = 0; k < MLM_QK_COUNT; k++)
        if (qkind_type[k] == type) return k;
    return -1;
}

uint32_t mlm_ggml_qkind_type(mlm_qkind k) { return qkind_type[k]; }

/* The block of 32 at column C (a multiple of 32) of a row of TYPE's blocks at ROW, as the
 * native panels take it: the same codes and fields the dequantizers above read. */
static void qraw(uint32_t type, const uint8_t *row, int64_t c, mlm_qraw *out) {
    memset(out, 0, sizeof *out);
    int s = (int)(c % QK_K / QK); /* sub-block of a super-block */
    switch (type) {
    case MLM_GGML_T_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)row + c / QK;
        out->d = le16(b->d);
        memcpy(out->u, b->qs, QK);
        break;
    }
    case MLM_GGML_T_Q4_0:
    case MLM_GGML_T_IQ4_NL: { /* the same block: d, then 16 bytes of nibbles */
        const block_q4_0 *b = (const block_q4_0 *)row + c / QK;
        out->d = le16(b->d);
        nibbles(b->qs, NULL, out->u);
        break;
    }
    case MLM_GGML_T_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)row + c / QK;
        out->d = le16(b->d), out->m = le16(b->m);
        nibbles(b->qs, NULL, out->u);
        break;
    }
    case MLM_GGML_T_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)row + c / QK;
        out->d = le16(b->d);
        nibbles(b->qs, b->qh, out->u);
        break;
    }
    case MLM_GGML_T_Q5_1: {
        const block_q5_1 *b = (const block_q5_1 *)row + c / QK;
        out->d = le16(b->d), out->m = le16(b->m);
        nibbles(b->qs, b->qh, out->u);
        break;
    }
    case MLM_GGML_T_Q4_K:
    case MLM_GGML_T_Q5_K: { /* q5_K is q4_K's layout plus qh */
        const block_q4_K *b4 = (const block_q4_K *)row + c / QK_K;
        const block_q5_K *b5 = (const block_q5_K *)row + c / QK_K;
        int five = type == MLM_GGML_T_Q5_K;
        const uint8_t *qs = five ? b5->qs : b4->qs;
        uint8_t sc[8], mn[8];
        scale_min_k4(five ? b5->scales : b4->scales, sc, mn);
        out->d = le16(five ? b5->d : b4->d), out->m = le16(five ? b5->dmin : b4->dmin);
        out->sub[0] = sc[s], out->sub[1] = mn[s];
        k_codes(qs, five ? b5->qh : NULL, s, out->u);
        break;
    }
    case MLM_GGML_T_Q6_K: {
        const block_q6_K *b = (const block_q6_K *)row + c / QK_K;
        out->d = le16(b->d);
        out->sub[0] = (uint8_t)b->scales[2 * s], out->sub[1] = (uint8_t)b->scales[2 * s + 1];
        q6_codes(b, s, out->u);
        break;
    }
    case MLM_GGML_T_IQ4_XS: {
        const block_iq4_xs *b = (const block_iq4_xs *)row + c / QK_K;
        out->d = le16(b->d);
        out->sub[0] = (uint8_t)(int8_t)iq4_xs_scale(b, s);
        nibbles(b->qs + 16 * s, NULL, out->u);
        break;
    }
    default: break;
    }
}

void mlm_ggml_qpanel_row(uint32_t type, const void *row, int64_t c0, int64_t cols, int64_t r,
                         uint8_t *dst) {
    mlm_qkind k = (mlm_qkind)mlm_ggml_qkind(type);
    const mlm_qgeom g = mlm_qpanel_geom(k, cols);
    for (int64_t b = 0; b < cols / QK; b++) {
        mlm_qraw raw;
        qraw(type, row, c0 + QK * b, &raw);
        mlm_qpanel_put(k, &g, r, b, &raw, dst);
    }
}

int mlm_ggml_can_dequantize(uint32_t type) {
    switch (type) {
    case MLM_GGML_T_F32:
    case MLM_GGML_T_F16:
    case MLM_GGML_T_BF16:
    case MLM_GGML_T_Q4_0:
    case MLM_GGML_T_Q4_1:
    case MLM_GGML_T_Q5_0:
    case MLM_GGML_T_Q5_1:
    case MLM_GGML_T_Q8_0:
    case MLM_GGML_T_Q2_K:
    case MLM_GGML_T_Q3_K:
    case MLM_GGML_T_Q4_K:
    case MLM_GGML_T_Q5_K:
    case MLM_GGML_T_Q6_K:
    case MLM_GGML_T_IQ4_NL:
    case MLM_GGML_T_IQ4_XS: return 1;
    default: return 0;
    }
}

void mlm_ggml_dequantize(uint32_t type, const void *src, int64_t n, float *dst) {
    const uint8_t *s = src;
    switch (type) {
    case MLM_GGML_T_F32: dequant_f32(s, n, dst); break;
    case MLM_GGML_T_F16: dequant_f16(s, n, dst); break;
    case MLM_GGML_T_BF16: dequant_bf16(s, n, dst); break;
    case MLM_GGML_T_Q4_0: dequant_q4_0(src, n / QK, dst); break;
    case MLM_GGML_T_Q4_1: dequant_q4_1(src, n / QK, dst); break;
    case MLM_GGML_T_Q5_0: dequant_q5_0(src, n / QK, dst); break;
    case MLM_GGML_T_Q5_1: dequant_q5_1(src, n / QK, dst); break;
    case MLM_GGML_T_Q8_0: dequant_q8_0(src, n / QK, dst); break;
    case MLM_GGML_T_Q2_K: dequant_q2_K(src, n / QK_K, dst); break;
    case MLM_GGML_T_Q3_K: dequant_q3_K(src, n / QK_K, dst); break;
    case MLM_GGML_T_Q4_K: dequant_q4_K(src, n / QK_K, dst); break;
    case MLM_GGML_T_Q5_K: dequant_q5_K(src, n / QK_K, dst); break;
    case MLM_GGML_T_Q6_K: dequant_q6_K(src, n / QK_K, dst); break;
    case MLM_GGML_T_IQ4_NL: dequant_iq4_nl(src, n / QK, dst); break;
    case MLM_GGML_T_IQ4_XS: dequant_iq4_xs(src, n / QK_K, dst); break;
    default: break; /* the caller checked mlm_ggml_can_dequantize */
    }
}

int mlm_wtype_of_ggml(uint32_t ggml) {
    int k = mlm_ggml_qkind(ggml);
    return k < 0 ? -1 : MLM_W_Q8_0 + k;
}
