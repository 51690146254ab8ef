/* tests/unit/test_generate.c: batched generation (mlm_exec_generate). Users of different
 * prompt lengths generated together give exactly the tokens each gets alone, whatever their
 * order, with the pool's pages or random disjoint page tables, in the f32 and the
 * performance profile (BFP weights, BFP8 KV); per-user sampling and stop ids; greedy tokens
 * equal transformers' on the fixture; bad arguments are refused. */
#include <jansson.h>

#include "harness.h"
#include "helpers.h"
#include "meshlm.h"

#define FIXTURE "tests/data/llama/gqa4_hd64_tied_r32"

static mlm_exec *exec_for(const mlm_model *m, int32_t seqs, int32_t step_tokens) {
    mlm_exec_params ep = mlm_exec_default_params();
    ep.max_seqs = seqs;
    ep.max_seq_len = 128;
    ep.block_size = 16;
    ep.max_num_blocks = seqs * 8 + 5;
    ep.max_step_tokens = step_tokens;
    mlm_exec *e = NULL;
    mlm_error err;
    CHECK_OK(mlm_exec_create(m, &ep, &e, &err), &err);
    return e;
}

#define N_USERS 6
static int32_t prompts[N_USERS][40];
static int32_t lens[N_USERS] = {5, 17, 1, 33, 9, 16};

static void make_users(mlm_gen_user *u, int n, const int *order, int sample) {
    for (int i = 0; i < n; i++) {
        int k = order[i];
        memset(&u[i], 0, sizeof u[i]);
        u[i].prompt = prompts[k], u[i].n_prompt = lens[k];
        u[i].sampling = mlm_sampler_default_params();
        if (sample) { /* per-user sampling, seeded per prompt so order does not matter */
            u[i].sampling.temperature = 0.5f + 0.1f * (float)k;
            u[i].sampling.top_k = 5 + k;
            u[i].sampling.top_p = 0.9f;
            u[i].sampling.seed = 100 + (uint64_t)k;
        }
        u[i].max_new_tokens = 12 + k;
    }
}

static void check_profile(const char *profile) {
    mlm_model *m = helper_load_or_fail(FIXTURE "/hf", profile, NULL, &harness_case_failed);
    if (!m) return;
    int32_t V = mlm_model_config(m)->n_vocab;
    for (int k = 0; k < N_USERS; k++)
        for (int i = 0; i < lens[k]; i++) prompts[k][i] = (int32_t)((k * 131 + i * 17 + 3) % V);
    for (int sample = 0; sample < 2; sample++) {
        /* alone */
        mlm_gen_output alone[N_USERS];
        mlm_exec *e1 = exec_for(m, 1, 64);
        for (int k = 0; k < N_USERS && e1; k++) {
            mlm_gen_user u;
            make_users(&u, 1, &k, sample);
            mlm_gen_stats st;
            mlm_error err;
            CHECK_OK(mlm_exec_generate(e1, &u, 1, NULL, 0, &alone[k], &st, &err), &err);
        }
        mlm_exec_free(e1);
        /* together, in a shuffled order, small steps (prompts split across steps), random
         * disjoint page tables */
        int order[N_USERS] = {3, 0, 5, 2, 1, 4};
        mlm_gen_user us[N_USERS];
        make_users(us, N_USERS, order, sample);
        mlm_exec *e = exec_for(m, N_USERS, 24);
        int32_t blocks[N_USERS][8];
        const int32_t *pages[N_USERS];
        for (int i = 0; i < N_USERS; i++) {
            for (int j = 0; j < 8; j++) blocks[i][j] = (j * N_USERS + i) * 7 % (N_USERS * 8 + 5);
            pages[i] = blocks[i];
        }
        mlm_gen_output together[N_USERS];
        mlm_gen_stats st;
        mlm_error err;
        if (e) CHECK_OK(mlm_exec_generate(e, us, N_USERS, pages, 8, together, &st, &err), &err);
        for (int i = 0; e && i < N_USERS; i++) {
            const mlm_gen_output *a = &alone[order[i]], *b = &together[i];
            CHECKF(a->n == b->n && !memcmp(a->tokens, b->tokens, (size_t)a->n * 4),
                   "%s sample=%d: prompt %d (%d tokens) differs in a batch", profile, sample,
                   order[i], lens[order[i]]);
            CHECK(b->n == us[i].max_new_tokens);
        }
        CHECK(e == NULL || (st.decode_steps > 0 && st.prefill_tokens > 0));
        for (int i = 0; e && i < N_USERS; i++) mlm_gen_output_deinit(&together[i]);
        for (int k = 0; k < N_USERS; k++) mlm_gen_output_deinit(&alone[k]);
        mlm_exec_free(e);
    }
    mlm_model_free(m);
}

TEST(batched_equals_alone_f32) { check_profile("f32"); }
TEST(batched_equals_alone_performance) { check_profile("performance"); }

/* Greedy batched generation reproduces transformers' greedy continuation of the fixture,
 * with the prompt in a batch next to other users; a stop id ends a user early. */
TEST(greedy_matches_transformers_and_stops) {
    json_error_t jerr;
    json_t *j = json_load_file(FIXTURE "/reference.json", 0, &jerr);
    CHECK(j != NULL);
    if (!j) return;
    json_t *g = json_object_get(j, "greedy");
    int32_t prompt[64], want[128];
    int np = 0, nw = 0;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(g, "prompt"), i, v) prompt[np++] = (int32_t)json_integer_value(v);
    json_array_foreach(json_object_get(g, "generated"), i, v) want[nw++] = (int32_t)json_integer_value(v);
    json_decref(j);
    mlm_model *m = helper_load_or_fail(FIXTURE "/hf", "f32", NULL, &harness_case_failed);
    mlm_exec *e = m ? exec_for(m, 3, 32) : NULL;
    if (!e) return;
    int32_t other[3] = {7, 8, 9}, stop = want[5];
    mlm_gen_user us[3] = {{0}};
    for (int k = 0; k < 3; k++) us[k].sampling = mlm_sampler_default_params();
    us[0].prompt = other, us[0].n_prompt = 3, us[0].max_new_tokens = 20;
    us[1].prompt = prompt, us[1].n_prompt = np, us[1].max_new_tokens = nw > 64 ? 64 : nw;
    us[2].prompt = prompt, us[2].n_prompt = np, us[2].max_new_tokens = 30;
    us[2].stop_ids = &stop, us[2].n_stop_ids = 1;
    mlm_gen_output out[3];
    mlm_gen_stats st;
    mlm_error err;
    CHECK_OK(mlm_exec_generate(e, us, 3, NULL, 0, out, &st, &err), &err);
    CHECKF(out[1].n == us[1].max_new_tokens &&
               !memcmp(out[1].tokens, want, (size_t)out[1].n * 4),
           "greedy tokens differ from transformers'");
    int first = 0;
    while (want[first] != stop) first++;
    CHECKF(out[2].stopped && out[2].n == first + 1, "stop id: n %d stopped %d", out[2].n,
           out[2].stopped);
    for (int k = 0; k < 3; k++) mlm_gen_output_deinit(&out[k]);
    /* refused: more users than slots; a prompt that does not fit */
    mlm_gen_user big = us[0];
    big.max_new_tokens = 500;
    CHECK(mlm_exec_generate(e, us, 4, NULL, 0, out, &st, &err) == MLM_ERR_INVALID_ARG);
    CHECK(mlm_exec_generate(e, &big, 1, NULL, 0, out, &st, &err) == MLM_ERR_CAPACITY);
    CHECK(strstr(err.msg, "max_seq_len") != NULL);
    mlm_exec_free(e);
    mlm_model_free(m);
}

int main(void) {
    RUN(batched_equals_alone_f32);
    RUN(batched_equals_alone_performance);
    RUN(greedy_matches_transformers_and_stops);
    return HARNESS_END();
}
