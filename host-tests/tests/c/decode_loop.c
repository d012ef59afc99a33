/* A vendor-SDK style integration of the edgekv C ABI: heap-allocated cache storage and arenas
 * (sized by the planner, so AddressSanitizer sees every byte past them), a system prompt
 * prefilled once, committed for reuse and snapshotted; then conversation turns that look the
 * prompt up, attach the cached prefix, prefill the rest and decode, with a forked branch per turn;
 * a second cache restored from the snapshot continues the same way. Every attention output of a
 * reused or restored sequence must equal the cold computation's bit for bit, and the cache must
 * stay consistent after every turn. Built and run by host-tests/tests/capi.rs under
 * -fsanitize=address,undefined (leaks included) where available; prints "N passed, N failed". */
#define _POSIX_C_SOURCE 200112L /* posix_memalign */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgekv.h"

static int passed, failed;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            passed++;                                                                \
        } else {                                                                     \
            failed++;                                                                \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                   \
        }                                                                            \
    } while (0)

#define OK(expr)                                                                     \
    do {                                                                             \
        ekv_status_t rc_ = (expr);                                                   \
        if (rc_ == EKV_OK) {                                                         \
            passed++;                                                                \
        } else {                                                                     \
            failed++;                                                                \
            printf("FAIL %s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #expr, (int)rc_,  \
                   ekv_strerror(rc_));                                               \
        }                                                                            \
    } while (0)

enum { LAYERS = 4, KV_HEADS = 2, HEAD_DIM = 32, Q_HEADS = 4, PAGE = 16, ROW = KV_HEADS * HEAD_DIM };
enum { SYSTEM = 40, USER = 9, DECODE = 8, TURNS = 3, MAX_TOKENS = 128, FINGERPRINT = 0x5EED };
enum { Q_ELEMS = Q_HEADS * HEAD_DIM };

/* What the "model" writes for token `tok` at position `pos`: K/V rows of one layer. */
static void kv_rows(uint32_t tok, uint32_t pos, uint16_t layer, float *k, float *v) {
    for (int i = 0; i < ROW; i++) {
        k[i] = (float)((tok * 13u + pos * 7u + layer * 5u + (uint32_t)i * 3u) % 29u) / 16.0f - 0.9f;
        v[i] = (float)((tok * 11u + pos * 3u + layer * 17u + (uint32_t)i * 5u) % 31u) / 8.0f - 1.9f;
    }
}

/* The query of position `pos` in layer `layer`. */
static void query(uint32_t pos, uint16_t layer, float *q) {
    for (int i = 0; i < Q_ELEMS; i++) q[i] = (float)((pos * 5u + layer * 3u + (uint32_t)i) % 23u) / 11.0f - 1.0f;
}

/* A cache on heap memory sized by the planner. */
typedef struct {
    ekv_cache_t *cache;
    void *data, *meta;
    float *scratch;
    size_t scratch_len;
} heap_cache;

static void *aligned(size_t align, size_t bytes) {
    void *p = NULL;
    size_t a = align < sizeof(void *) ? sizeof(void *) : align;
    return posix_memalign(&p, a, bytes) == 0 ? p : NULL;
}

static int open_cache(heap_cache *h, const ekv_config_t *cfg) {
    ekv_plan_t plan;
    OK(ekv_plan_pages(cfg, 24, &plan));
    h->cache = aligned(ekv_cache_storage_align(), sizeof(ekv_cache_t));
    h->data = aligned(plan.data_align, plan.data_bytes);
    h->meta = aligned(plan.meta_align, plan.meta_bytes);
    if (!h->cache || !h->data || !h->meta) return 0;
    memset(h->cache, 0, sizeof(ekv_cache_t));
    OK(ekv_cache_create(h->cache, cfg, h->data, plan.data_bytes, h->meta, plan.meta_bytes));
    OK(ekv_cache_attention_scratch_len(h->cache, Q_HEADS, &h->scratch_len));
    h->scratch = malloc(h->scratch_len * sizeof(float));
    return h->scratch != NULL;
}

static void close_cache(heap_cache *h) {
    OK(ekv_cache_check(h->cache));
    OK(ekv_cache_destroy(h->cache));
    free(h->scratch);
    free(h->data);
    free(h->meta);
    free(h->cache);
}

/* Appends `tokens[from..to)` to `seq` (K/V of every layer) and writes the attention output of
 * every layer for the last position into `out` (LAYERS x Q_ELEMS). */
static void run(heap_cache *h, ekv_seq_t seq, const uint32_t *tokens, uint32_t from, uint32_t to, float *out) {
    ekv_attention_params_t params;
    uint32_t first = 0;
    float k[ROW], v[ROW], q[Q_ELEMS];
    OK(ekv_attention_params_init(&params, Q_HEADS, HEAD_DIM));
    OK(ekv_seq_reserve(h->cache, seq, to - from, &first));
    CHECK(first == from);
    for (uint32_t pos = from; pos < to; pos++)
        for (uint16_t l = 0; l < LAYERS; l++) {
            kv_rows(tokens[pos], pos, l, k, v);
            OK(ekv_write_kv_f32(h->cache, seq, l, pos, k, v, ROW));
        }
    for (uint16_t l = 0; l < LAYERS; l++) {
        query(to - 1, l, q);
        OK(ekv_attention(h->cache, seq, l, to - 1, q, Q_ELEMS, out + l * Q_ELEMS, Q_ELEMS, &params,
                         h->scratch, h->scratch_len));
    }
}

/* The next token: a deterministic function of the attention outputs' bits. */
static uint32_t next_token(const float *out) {
    uint32_t acc = 0, bits;
    for (int i = 0; i < LAYERS * Q_ELEMS; i++) {
        memcpy(&bits, &out[i], sizeof bits);
        acc = acc * 31u + bits;
    }
    return 1000u + acc % 5000u;
}

/* One turn on `h`: a sequence for `prompt` (the cached prefix attached when `reuse`), then DECODE
 * tokens; the outputs of every step go to `outs` (DECODE+1 x LAYERS x Q_ELEMS). A fork of the
 * sequence decodes one other token and is freed. Returns the sequence, freed by the caller. */
static ekv_seq_t turn(heap_cache *h, uint32_t *prompt, uint32_t len, int reuse, float *outs) {
    ekv_seq_t seq, branch;
    uint32_t attached = 0;
    OK(ekv_seq_create(h->cache, EKV_SEQ_PAGED, &seq));
    if (reuse) {
        ekv_prefix_hit_t hit;
        OK(ekv_prefix_lookup(h->cache, prompt, len, &hit));
        CHECK(hit.tokens >= PAGE);
        OK(ekv_prefix_attach(h->cache, seq, &hit, prompt, len, &attached));
        CHECK(attached == hit.tokens);
    }
    run(h, seq, prompt, attached, len, outs);
    for (int step = 0; step < DECODE; step++) {
        float *prev = outs + step * LAYERS * Q_ELEMS;
        prompt[len] = next_token(prev);
        run(h, seq, prompt, len, len + 1, prev + LAYERS * Q_ELEMS);
        len++;
    }
    OK(ekv_seq_fork(h->cache, seq, &branch));
    {
        float other[LAYERS * Q_ELEMS];
        prompt[len] = 7u;
        run(h, branch, prompt, len, len + 1, other);
    }
    OK(ekv_seq_free(h->cache, branch));
    OK(ekv_cache_check(h->cache));
    return seq;
}

int main(void) {
    ekv_config_t cfg;
    heap_cache a, b;
    uint32_t system[SYSTEM], prompt[MAX_TOKENS], restored[MAX_TOKENS];
    enum { OUTS = (DECODE + 1) * LAYERS * Q_ELEMS };
    float *cold = malloc(OUTS * sizeof(float)), *warm = malloc(OUTS * sizeof(float));
    unsigned char *image;
    size_t image_bytes = 0, n = 0;
    ekv_seq_t sys, sys_b, seq;
    uint16_t published = 0;

    OK(ekv_config_init(&cfg, LAYERS, KV_HEADS, HEAD_DIM));
    cfg.page_tokens = PAGE;
    cfg.k_format = (ekv_format_t){.kind = EKV_FORMAT_INT8, .group = 32};
    cfg.v_format = (ekv_format_t){.kind = EKV_FORMAT_F16};
    cfg.max_seqs = 4;
    cfg.max_seq_tokens = MAX_TOKENS;
    if (!cold || !warm || !open_cache(&a, &cfg)) {
        printf("out of memory\n");
        return 2;
    }

    /* The system prompt: prefilled once, committed for reuse, snapshotted. */
    for (uint32_t i = 0; i < SYSTEM; i++) system[i] = 100u + i * 3u;
    OK(ekv_seq_create(a.cache, EKV_SEQ_PAGED, &sys));
    run(&a, sys, system, 0, SYSTEM, cold);
    OK(ekv_commit_prompt(a.cache, sys, system, SYSTEM, &published));
    CHECK(published == SYSTEM / PAGE);
    OK(ekv_snapshot_size(a.cache, sys, &image_bytes));
    image = malloc(image_bytes);
    if (!image) return 2;
    OK(ekv_snapshot_to_buffer(a.cache, sys, system, SYSTEM, FINGERPRINT, image, image_bytes, NULL));

    /* Turns: cold (no reuse) and warm (prefix attached) must give the same bits. */
    for (uint32_t t = 0; t < TURNS; t++) {
        uint32_t len = SYSTEM + USER;
        memcpy(prompt, system, sizeof system);
        for (uint32_t i = 0; i < USER; i++) prompt[SYSTEM + i] = 2000u + t * 50u + i;
        seq = turn(&a, prompt, len, 0, cold);
        OK(ekv_seq_free(a.cache, seq));
        seq = turn(&a, prompt, len, 1, warm);
        CHECK(memcmp(cold, warm, OUTS * sizeof(float)) == 0);
        OK(ekv_seq_free(a.cache, seq));
    }

    /* A second cache, as after a reboot: the system prompt restored from the image. */
    if (!open_cache(&b, &cfg)) return 2;
    OK(ekv_seq_free(a.cache, sys)); /* the committed prefix stays cached in `a` */
    OK(ekv_restore_from_buffer(b.cache, image, image_bytes, FINGERPRINT, restored, MAX_TOKENS, &n, &sys_b));
    CHECK(n == SYSTEM && memcmp(restored, system, sizeof system) == 0);
    {
        uint32_t len = SYSTEM + USER;
        memcpy(prompt, system, sizeof system);
        for (uint32_t i = 0; i < USER; i++) prompt[SYSTEM + i] = 2000u + i;
        seq = turn(&a, prompt, len, 0, cold);
        OK(ekv_seq_free(a.cache, seq));
        seq = turn(&b, prompt, len, 1, warm);
        CHECK(memcmp(cold, warm, OUTS * sizeof(float)) == 0);
        OK(ekv_seq_free(b.cache, seq));
    }
    OK(ekv_seq_free(b.cache, sys_b));
    close_cache(&b);
    close_cache(&a);
    free(image);
    free(cold);
    free(warm);
    printf("decode_loop: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
