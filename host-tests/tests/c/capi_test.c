/* The edgekv C ABI exercised from C: sizing, creation, sequences, rows, attention against a
 * direct computation in C, prefix reuse, segment lists, region binding, stats, Ethos-U hooks,
 * every error path (NULL, bad and stale handles, wrong sizes, misalignment, overlap), and the
 * header's contract: a failed call writes no output, reserve secures copy-on-write pages,
 * handles are bound to their cache instance, one mistake gets one code; and its numerics: int8
 * keys score against the query rounded to 16-bit codes per key group, as documented.
 * Strict C99 (built with -std=c99 -pedantic -Wall -Wextra -Werror, and again under
 * -fsanitize=address,undefined where available) by host-tests/tests/capi.rs; prints
 * "N passed, N failed" and exits nonzero on any failure. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
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

#define CHECK_RC(expr, want)                                                         \
    do {                                                                             \
        ekv_status_t rc_ = (expr);                                                   \
        if (rc_ == (want)) {                                                         \
            passed++;                                                                \
        } else {                                                                     \
            failed++;                                                                \
            printf("FAIL %s:%d: %s = %d (%s), want %d (%s)\n", __FILE__, __LINE__,   \
                   #expr, (int)rc_, ekv_strerror(rc_), (int)(want),                  \
                   ekv_strerror(want));                                              \
        }                                                                            \
    } while (0)

enum { LAYERS = 2, KV_HEADS = 2, HEAD_DIM = 8, Q_HEADS = 4, PAGE = 4, ROW = KV_HEADS * HEAD_DIM };

/* C99 has no alignas: buffers are over-allocated and aligned by hand. */
#define ALIGN_UP(p, a) ((void *)(((uintptr_t)(p) + (uintptr_t)(a) - 1u) & ~(uintptr_t)((a) - 1u)))
enum { DATA_BYTES = 64 * 1024, META_BYTES = 16 * 1024 };

static ekv_cache_t cache; /* static storage: zeroed, as the ABI asks */
static unsigned char data_raw[DATA_BYTES + 64], meta_raw[META_BYTES + 64];
static unsigned char *data_arena, *meta_arena; /* 64-byte aligned, set in main */
/* The alignment of ekv_cache_t, without C11's _Alignof. */
struct align_probe {
    char c;
    ekv_cache_t x;
};

static float value(int t, int h, int d, float base) { return base + 0.01f * (float)(t * 37 + h * 11 + d * 3 % 17) - 0.3f * (float)((t + d) % 3); }

static void make_rows(float *out, int n, int start, float base) {
    for (int t = 0; t < n; t++)
        for (int h = 0; h < KV_HEADS; h++)
            for (int d = 0; d < HEAD_DIM; d++)
                out[(t * KV_HEADS + h) * HEAD_DIM + d] = value(start + t, h, d, base);
}

/* Causal attention of query position t over keys [0, t], computed directly. */
static void reference_attention(const float *k, const float *v, const float *q, int t, float scale, float *out) {
    for (int qh = 0; qh < Q_HEADS; qh++) {
        int kh = qh / (Q_HEADS / KV_HEADS);
        float scores[64], mx = -INFINITY, sum = 0.0f;
        for (int j = 0; j <= t; j++) {
            float s = 0.0f;
            for (int d = 0; d < HEAD_DIM; d++) s += q[qh * HEAD_DIM + d] * k[(j * KV_HEADS + kh) * HEAD_DIM + d];
            scores[j] = s * scale;
            if (scores[j] > mx) mx = scores[j];
        }
        for (int j = 0; j <= t; j++) { scores[j] = expf(scores[j] - mx); sum += scores[j]; }
        for (int d = 0; d < HEAD_DIM; d++) {
            float acc = 0.0f;
            for (int j = 0; j <= t; j++) acc += scores[j] * v[(j * KV_HEADS + kh) * HEAD_DIM + d];
            out[qh * HEAD_DIM + d] = acc / sum;
        }
    }
}

static int cleans, invalidates;
static int count_clean(void *ctx, void *addr, size_t len) {
    (void)ctx;
    if ((uintptr_t)addr % 32 != 0 || len % 32 != 0) return -1;
    cleans++;
    return 0;
}
static int count_invalidate(void *ctx, void *addr, size_t len) {
    (void)ctx; (void)addr; (void)len;
    invalidates++;
    return 0;
}
static int fail_cb(void *ctx, void *addr, size_t len) { (void)ctx; (void)addr; (void)len; return 5; }

static void test_sizes_and_config(ekv_config_t *cfg, ekv_plan_t *plan) {
    CHECK(sizeof(ekv_cache_t) >= ekv_cache_storage_size());
    CHECK(ekv_cache_storage_align() == offsetof(struct align_probe, x));
    CHECK_RC(ekv_config_init(cfg, LAYERS, KV_HEADS, HEAD_DIM), EKV_OK);
    CHECK(cfg->page_tokens == 16 && cfg->align == 64 && cfg->prefix_index == 1);
    cfg->page_tokens = PAGE;
    cfg->max_seqs = 4;
    cfg->max_seq_tokens = 64;
    CHECK_RC(ekv_plan(cfg, DATA_BYTES, plan), EKV_OK);
    CHECK(plan->num_pages > 8 && plan->data_bytes <= DATA_BYTES);
    CHECK(plan->meta_bytes <= META_BYTES);
    CHECK(plan->page_bytes == (size_t)LAYERS * 2 * PAGE * ROW * 4); /* f32: 512 bytes per pool page */
    ekv_plan_t p2;
    CHECK_RC(ekv_plan_pages(cfg, 10, &p2), EKV_OK);
    CHECK(p2.num_pages == 10 && p2.data_bytes == 10 * plan->page_bytes);
    CHECK_RC(ekv_plan_for(cfg, 10, 2, &p2), EKV_OK);
    CHECK(p2.num_pages == 6);
    /* Bad configurations. */
    ekv_config_t bad = *cfg;
    bad.page_tokens = 3;
    CHECK_RC(ekv_plan(&bad, DATA_BYTES, &p2), EKV_ERR_PAGE_TOKENS_NOT_POWER_OF_TWO);
    bad = *cfg;
    bad.k_format.kind = 42;
    CHECK_RC(ekv_plan(&bad, DATA_BYTES, &p2), EKV_ERR_INVALID_ARGUMENT);
    bad = *cfg;
    bad.v_format = (ekv_format_t){.kind = EKV_FORMAT_INT8, .group = 3};
    CHECK_RC(ekv_plan(&bad, DATA_BYTES, &p2), EKV_ERR_INVALID_FORMAT);
    bad = *cfg;
    bad.layers = 0;
    CHECK_RC(ekv_plan(&bad, DATA_BYTES, &p2), EKV_ERR_ZERO_SIZE);
    CHECK_RC(ekv_plan(cfg, 100, &p2), EKV_ERR_ARENA_TOO_SMALL);
    CHECK_RC(ekv_plan(NULL, 100, &p2), EKV_ERR_NULL);
    CHECK_RC(ekv_plan(cfg, 100, NULL), EKV_ERR_NULL);
}

static void test_bad_handles_and_create(const ekv_config_t *cfg) {
    ekv_stats_t st;
    ekv_seq_t s;
    CHECK_RC(ekv_cache_stats(&cache, &st), EKV_ERR_BAD_HANDLE); /* zeroed storage */
    CHECK_RC(ekv_cache_stats(NULL, &st), EKV_ERR_NULL);
    CHECK_RC(ekv_seq_create(NULL, EKV_SEQ_PAGED, &s), EKV_ERR_NULL);
    CHECK_RC(ekv_cache_destroy(&cache), EKV_ERR_BAD_HANDLE);
    CHECK_RC(ekv_cache_create(&cache, cfg, data_arena, DATA_BYTES, data_arena, META_BYTES), EKV_ERR_OVERLAP);
    CHECK_RC(ekv_cache_create(&cache, cfg, data_arena + 8, 1024, meta_arena, META_BYTES), EKV_ERR_MISALIGNED_ARENA);
    CHECK_RC(ekv_cache_create(&cache, cfg, data_arena, DATA_BYTES, meta_arena, 16), EKV_ERR_ARENA_TOO_SMALL);
    CHECK_RC(ekv_cache_create(&cache, NULL, data_arena, DATA_BYTES, meta_arena, META_BYTES), EKV_ERR_NULL);
    CHECK_RC(ekv_cache_create(&cache, cfg, data_arena, DATA_BYTES, meta_arena, META_BYTES), EKV_OK);
    CHECK_RC(ekv_cache_check(&cache), EKV_OK);
    CHECK_RC(ekv_cache_create(&cache, cfg, data_arena, DATA_BYTES, meta_arena, META_BYTES), EKV_ERR_BUSY);
    /* A copy of live storage is not a cache. */
    static ekv_cache_t copy;
    memcpy(&copy, &cache, sizeof cache);
    CHECK_RC(ekv_cache_stats(&copy, &st), EKV_ERR_BAD_HANDLE);
    /* Misaligned storage. */
    CHECK_RC(ekv_cache_check((ekv_cache_t *)(void *)((char *)&copy + 4)), EKV_ERR_MISALIGNED_POINTER);
}

static void test_sequences_rows_attention(void) {
    ekv_seq_t s, child, stale;
    uint32_t first = 99;
    enum { N = 7 };
    static float k[N * ROW], v[N * ROW], back[N * ROW];
    make_rows(k, N, 0, 0.2f);
    make_rows(v, N, 0, -1.0f);

    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &stale), EKV_OK);
    CHECK_RC(ekv_seq_free(&cache, stale), EKV_OK);
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &s), EKV_OK);
    CHECK((s & 0xffff) == (stale & 0xffff) && s != stale); /* slot reused, new generation */
    CHECK_RC(ekv_seq_reserve(&cache, stale, 1, NULL), EKV_ERR_UNKNOWN_SEQUENCE);
    CHECK_RC(ekv_seq_create(&cache, 5, &child), EKV_ERR_INVALID_ARGUMENT);
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_CONTIGUOUS, &child), EKV_ERR_CONTIGUOUS_UNSUPPORTED);
    CHECK_RC(ekv_seq_reserve(&cache, s, N, &first), EKV_OK);
    CHECK(first == 0);
    CHECK_RC(ekv_seq_reserve(&cache, s, 1000, NULL), EKV_ERR_SEQUENCE_FULL);

    for (uint16_t l = 0; l < LAYERS; l++) CHECK_RC(ekv_write_kv_f32(&cache, s, l, 0, k, v, N * ROW), EKV_OK);
    CHECK_RC(ekv_read_f32(&cache, s, 1, EKV_V, 0, back, N * ROW), EKV_OK);
    CHECK(memcmp(back, v, sizeof v) == 0);
    /* f16 in and out. */
    uint16_t h[ROW], h2[ROW];
    for (int i = 0; i < ROW; i++) h[i] = (uint16_t)(0x3c00 + i); /* 1.0 + i ulp */
    CHECK_RC(ekv_write_f16(&cache, s, 0, EKV_K, 6, h, ROW), EKV_OK);
    CHECK_RC(ekv_read_f16(&cache, s, 0, EKV_K, 6, h2, ROW), EKV_OK);
    CHECK(memcmp(h, h2, sizeof h) == 0);
    CHECK_RC(ekv_write_f32(&cache, s, 0, EKV_K, 6, k + 6 * ROW, ROW), EKV_OK);

    /* Bad row calls. */
    CHECK_RC(ekv_write_f32(&cache, s, 0, EKV_K, 0, k, ROW - 1), EKV_ERR_LENGTH_MISMATCH);
    CHECK_RC(ekv_write_f32(&cache, s, 0, EKV_K, 6, k, 2 * ROW), EKV_ERR_POSITION_OUT_OF_RANGE);
    CHECK_RC(ekv_write_f32(&cache, s, LAYERS, EKV_K, 0, k, ROW), EKV_ERR_LAYER_OUT_OF_RANGE);
    CHECK_RC(ekv_write_f32(&cache, s, 0, 7, 0, k, ROW), EKV_ERR_INVALID_ARGUMENT);
    CHECK_RC(ekv_write_f32(&cache, s, 0, EKV_K, 0, NULL, ROW), EKV_ERR_NULL);
    CHECK_RC(ekv_write_f32(&cache, s, 0, EKV_K, 0, (const float *)(const void *)((const char *)k + 2), ROW), EKV_ERR_MISALIGNED_POINTER);
    CHECK_RC(ekv_write_f32(&cache, s, 0, EKV_K, 0, (const float *)(const void *)data_arena, ROW), EKV_ERR_OVERLAP);
    CHECK_RC(ekv_read_f32(&cache, s, 0, EKV_K, 0, (float *)(void *)&cache, ROW), EKV_ERR_OVERLAP);
    CHECK_RC(ekv_write_f32(&cache, stale, 0, EKV_K, 0, k, ROW), EKV_ERR_UNKNOWN_SEQUENCE);

    /* Attention: queries at positions 5 and 6 (a prefill chunk of two rows), GQA 4 over 2. */
    ekv_attention_params_t params;
    CHECK_RC(ekv_attention_params_init(&params, Q_HEADS, HEAD_DIM), EKV_OK);
    CHECK(fabsf(params.scale - 1.0f / sqrtf((float)HEAD_DIM)) < 1e-7f);
    float q[2 * Q_HEADS * HEAD_DIM], out[2 * Q_HEADS * HEAD_DIM], want[Q_HEADS * HEAD_DIM];
    for (int i = 0; i < 2 * Q_HEADS * HEAD_DIM; i++) q[i] = 0.05f * (float)((i * 7) % 13) - 0.3f;
    size_t scratch_len = ekv_attention_scratch_len(Q_HEADS, PAGE, HEAD_DIM);
    CHECK(scratch_len == Q_HEADS * (PAGE + 4 + 2 * HEAD_DIM));
    float scratch[128];
    CHECK_RC(ekv_attention(&cache, s, 1, 5, q, 2 * Q_HEADS * HEAD_DIM, out, 2 * Q_HEADS * HEAD_DIM, &params, scratch, scratch_len), EKV_OK);
    float max_err = 0.0f;
    for (int r = 0; r < 2; r++) {
        reference_attention(k, v, q + r * Q_HEADS * HEAD_DIM, 5 + r, params.scale, want);
        for (int i = 0; i < Q_HEADS * HEAD_DIM; i++) {
            float e = fabsf(out[r * Q_HEADS * HEAD_DIM + i] - want[i]);
            if (e > max_err) max_err = e;
        }
    }
    printf("attention max |error| vs C reference: %g\n", (double)max_err);
    CHECK(max_err < 1e-5f);
    /* Sliding window: sinks 1, window 2 at position 6 sees keys 0, 5, 6. */
    ekv_attention_params_t win = params;
    win.window_sinks = 1;
    win.window_size = 2;
    CHECK_RC(ekv_attention(&cache, s, 1, 6, q, Q_HEADS * HEAD_DIM, out, Q_HEADS * HEAD_DIM, &win, scratch, scratch_len), EKV_OK);
    /* Attention errors. */
    CHECK_RC(ekv_attention(&cache, s, 1, 5, q, Q_HEADS * HEAD_DIM, out, Q_HEADS * HEAD_DIM, &params, scratch, scratch_len - 1), EKV_ERR_LENGTH_MISMATCH);
    CHECK_RC(ekv_attention(&cache, s, 1, 5, q, Q_HEADS * HEAD_DIM, q + 4, Q_HEADS * HEAD_DIM, &params, scratch, scratch_len), EKV_ERR_OVERLAP);
    CHECK_RC(ekv_attention(&cache, s, 1, 6, q, 2 * Q_HEADS * HEAD_DIM, out, 2 * Q_HEADS * HEAD_DIM, &params, scratch, scratch_len), EKV_ERR_POSITION_OUT_OF_RANGE);
    CHECK_RC(ekv_attention(&cache, s, 1, 5, q, Q_HEADS * HEAD_DIM, out, Q_HEADS * HEAD_DIM, NULL, scratch, scratch_len), EKV_ERR_NULL);
    win.q_heads = 3;
    CHECK_RC(ekv_attention(&cache, s, 1, 5, q, 3 * HEAD_DIM, out, 3 * HEAD_DIM, &win, scratch, scratch_len), EKV_ERR_HEAD_MISMATCH);

    /* Fork shares full pages; truncate; info; page table. */
    ekv_seq_info_t info;
    CHECK_RC(ekv_seq_fork(&cache, s, &child), EKV_OK);
    CHECK_RC(ekv_seq_info(&cache, child, &info), EKV_OK);
    CHECK(info.len == N && info.pages == 2 && info.mode == EKV_SEQ_PAGED);
    CHECK_RC(ekv_seq_truncate(&cache, child, 9), EKV_ERR_TRUNCATE_BEYOND_LENGTH);
    CHECK_RC(ekv_seq_truncate(&cache, child, 4), EKV_OK);
    uint16_t table[8];
    size_t n_table = 0;
    CHECK_RC(ekv_seq_page_table(&cache, s, table, 1, &n_table), EKV_ERR_BUFFER_TOO_SMALL);
    CHECK(n_table == 2);
    CHECK_RC(ekv_seq_page_table(&cache, s, table, 8, &n_table), EKV_OK);
    uint16_t child_table[8];
    CHECK_RC(ekv_seq_page_table(&cache, child, child_table, 8, &n_table), EKV_OK);
    CHECK(n_table == 1 && child_table[0] == table[0]); /* shared full page */
    ekv_stats_t st;
    CHECK_RC(ekv_cache_stats(&cache, &st), EKV_OK);
    CHECK(st.sequences == 2 && st.tokens == N + 4 && st.pages_used == 2); /* the tail copy went with the truncate */
    CHECK_RC(ekv_seq_free(&cache, child), EKV_OK);
    CHECK_RC(ekv_seq_free(&cache, s), EKV_OK);
    CHECK_RC(ekv_seq_free(&cache, s), EKV_ERR_UNKNOWN_SEQUENCE);
}

static void test_prefix(void) {
    enum { LEN = 10 };
    uint32_t prompt[LEN + 2];
    for (int i = 0; i < LEN + 2; i++) prompt[i] = 1000u + (uint32_t)i;
    static float rows[LEN * ROW];
    make_rows(rows, LEN, 0, 0.5f);
    ekv_seq_t a, b;
    uint16_t published = 0;
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &a), EKV_OK);
    CHECK_RC(ekv_seq_reserve(&cache, a, LEN, NULL), EKV_OK);
    for (uint16_t l = 0; l < LAYERS; l++) CHECK_RC(ekv_write_kv_f32(&cache, a, l, 0, rows, rows, LEN * ROW), EKV_OK);
    CHECK_RC(ekv_commit_prompt(&cache, a, prompt, LEN, &published), EKV_OK);
    CHECK(published == 2);
    CHECK_RC(ekv_commit_prompt(&cache, a, prompt, LEN + 2, NULL), EKV_ERR_PROMPT_MISMATCH);

    ekv_prefix_hit_t hit;
    CHECK_RC(ekv_prefix_lookup(&cache, prompt, LEN + 2, &hit), EKV_OK);
    CHECK(hit.tokens == 8 && hit.pages == 2 && hit.matched == 8);
    CHECK_RC(ekv_prefix_lookup(&cache, NULL, 3, &hit), EKV_ERR_NULL);
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &b), EKV_OK);
    ekv_prefix_hit_t wrong = hit;
    wrong.tokens = 4;
    wrong.pages = 1;
    uint32_t attached = 0;
    CHECK_RC(ekv_prefix_attach(&cache, b, &wrong, prompt, LEN + 2, &attached), EKV_ERR_STALE_HIT);
    CHECK_RC(ekv_prefix_attach(&cache, b, &hit, prompt, LEN + 2, &attached), EKV_OK);
    CHECK(attached == 8);
    float got[ROW];
    CHECK_RC(ekv_read_f32(&cache, b, 1, EKV_K, 7, got, ROW), EKV_OK);
    CHECK(memcmp(got, rows + 7 * ROW, sizeof got) == 0);
    CHECK_RC(ekv_prefix_attach(&cache, b, &hit, prompt, LEN + 2, &attached), EKV_ERR_SEQUENCE_NOT_EMPTY);
    uint32_t kept = 0;
    uint32_t other[LEN];
    memcpy(other, prompt, sizeof other);
    other[5] = 7;
    CHECK_RC(ekv_reuse_prefix(&cache, a, prompt, LEN, other, LEN, &kept), EKV_OK);
    CHECK(kept == 4);
    ekv_stats_t st;
    CHECK_RC(ekv_cache_stats(&cache, &st), EKV_OK);
    CHECK(st.pages_registered == 2);
    CHECK_RC(ekv_set_namespace(&cache, 77), EKV_OK);
    CHECK_RC(ekv_prefix_lookup(&cache, prompt, LEN + 2, &hit), EKV_OK);
    CHECK(hit.tokens == 0);
    CHECK_RC(ekv_seq_free(&cache, a), EKV_OK);
    CHECK_RC(ekv_seq_free(&cache, b), EKV_OK);
}

static void test_device_views(void) {
    ekv_seq_t s;
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &s), EKV_OK);
    CHECK_RC(ekv_seq_reserve(&cache, s, 3 * PAGE, NULL), EKV_OK);
    ekv_segment_t segs[4];
    size_t n = 0, nv = 0, ns = 0;
    CHECK_RC(ekv_segments(&cache, NULL, s, 0, EKV_POOL_K_VALUES, segs, 4, &n), EKV_OK);
    CHECK(n >= 1);
    size_t pages = 0;
    for (size_t i = 0; i < n; i++) pages += segs[i].pages;
    CHECK(pages == 3);
    CHECK(segs[0].dev == (uint64_t)segs[0].cpu);
    CHECK(segs[0].cpu >= (size_t)(uintptr_t)data_arena && segs[0].cpu < (size_t)(uintptr_t)data_arena + DATA_BYTES);
    CHECK_RC(ekv_segments(&cache, NULL, s, 0, EKV_POOL_K_VALUES, segs, 0, &n), EKV_ERR_BUFFER_TOO_SMALL);
    CHECK_RC(ekv_segments(&cache, NULL, s, 0, 9, segs, 4, &n), EKV_ERR_INVALID_ARGUMENT);

    /* A device alias of the data arena. */
    ekv_address_map_t alias = {.kind = EKV_MAP_OFFSET,
                               .window = {.cpu_base = (size_t)(uintptr_t)data_arena, .len = DATA_BYTES, .dev_base = 0x80000000u}};
    CHECK_RC(ekv_segments(&cache, &alias, s, 1, EKV_POOL_V_VALUES, segs, 4, &n), EKV_OK);
    CHECK(segs[0].dev == 0x80000000u + (segs[0].cpu - (size_t)(uintptr_t)data_arena));
    ekv_map_entry_t entries[2] = {{.cpu_base = (size_t)(uintptr_t)data_arena, .len = 1024, .dev_base = 0x1000},
                                  {.cpu_base = (size_t)(uintptr_t)data_arena + 512, .len = 1024, .dev_base = 0x9000}};
    ekv_address_map_t overlapping = {.kind = EKV_MAP_TABLE, .entries = entries, .n_entries = 2};
    CHECK_RC(ekv_segments(&cache, &overlapping, s, 0, 0, segs, 4, &n), EKV_ERR_WINDOW_OVERLAP);
    ekv_address_map_t tiny = {.kind = EKV_MAP_OFFSET, .window = {.cpu_base = 16, .len = 16, .dev_base = 0}};
    CHECK_RC(ekv_segments(&cache, &tiny, s, 0, 0, segs, 4, &n), EKV_ERR_UNMAPPED);

    /* Read view with counting maintenance: every segment cleaned. */
    ekv_maintenance_t m = {.ctx = NULL, .line_size = 32, .clean = count_clean, .invalidate = count_invalidate, .clean_invalidate = count_invalidate};
    cleans = 0;
    CHECK_RC(ekv_read_view(&cache, &alias, &m, s, 0, EKV_K, segs, 4, NULL, 0, &nv, &ns), EKV_OK);
    CHECK(nv >= 1 && ns == 0 && cleans == (int)nv);
    ekv_maintenance_t failing = m;
    failing.clean = fail_cb;
    CHECK_RC(ekv_read_view(&cache, NULL, &failing, s, 0, EKV_K, segs, 4, NULL, 0, &nv, &ns), EKV_ERR_MAINTENANCE);
    ekv_maintenance_t no_fn = m;
    no_fn.invalidate = NULL;
    CHECK_RC(ekv_read_view(&cache, NULL, &no_fn, s, 0, EKV_K, segs, 4, NULL, 0, &nv, &ns), EKV_ERR_NULL);
    ekv_maintenance_t odd_line = m;
    odd_line.line_size = 24;
    CHECK_RC(ekv_read_view(&cache, NULL, &odd_line, s, 0, EKV_K, segs, 4, NULL, 0, &nv, &ns), EKV_ERR_INVALID_LINE_SIZE);
    CHECK_RC(ekv_read_view(&cache, NULL, NULL, s, 0, 3, segs, 4, NULL, 0, &nv, &ns), EKV_ERR_INVALID_ARGUMENT);

    /* Region binding: offsets from the arena base. */
    uint32_t offsets[3];
    ekv_region_t region;
    cleans = 0;
    CHECK_RC(ekv_bind_region(&cache, &alias, &m, s, 1, EKV_V, offsets, 3, NULL, 0, &region), EKV_OK);
    CHECK(region.base == 0x80000000u && region.cpu == (size_t)(uintptr_t)data_arena && region.pages == 3);
    CHECK(cleans == 3);
    for (int i = 0; i < 3; i++) CHECK(offsets[i] % 64 == 0 && offsets[i] < region.len);
    CHECK_RC(ekv_bind_region(&cache, &alias, &m, s, 1, EKV_V, offsets, 2, NULL, 0, &region), EKV_ERR_BUFFER_TOO_SMALL);
    CHECK(region.pages == 3);

    /* Gather and ingest through line-aligned staging (2 rows = 128 bytes). */
    static float staging_raw[2 * ROW + 8];
    float *staging = ALIGN_UP(staging_raw, 32);
    float row[ROW];
    static float src[2 * ROW];
    make_rows(src, 2, 0, 4.0f);
    CHECK_RC(ekv_write_f32(&cache, s, 0, EKV_K, 0, src, 2 * ROW), EKV_OK);
    uint32_t got = 0;
    CHECK_RC(ekv_gather_f32(&cache, &m, s, 0, EKV_K, 0, staging, 2 * ROW, row, ROW, &got), EKV_OK);
    CHECK(got == 2 && staging[0] == src[0] && staging[HEAD_DIM] == src[ROW]); /* head-major */
    invalidates = 0;
    for (int i = 0; i < 2 * ROW; i++) staging[i] = (float)i;
    CHECK_RC(ekv_ingest_f32(&cache, &m, s, 1, EKV_V, 4, staging, 2 * ROW, &got), EKV_OK);
    CHECK(got == 2 && invalidates == 1);
    float back[2 * ROW];
    CHECK_RC(ekv_read_f32(&cache, s, 1, EKV_V, 4, back, 2 * ROW), EKV_OK);
    CHECK(back[5] == 5.0f && back[2 * ROW - 1] == (float)(2 * ROW - 1));
    CHECK_RC(ekv_gather_f32(&cache, &m, s, 0, EKV_K, 0, staging, ROW + 1, row, ROW, &got), EKV_ERR_SHAPE_MISMATCH);
    CHECK_RC(ekv_seq_free(&cache, s), EKV_OK);
}

static void test_int8_split_cache(void) {
    static ekv_cache_t q8;
    static unsigned char buf_raw[32 * 1024 + 64];
    unsigned char *buf = ALIGN_UP(buf_raw, 64);
    enum { BUF_BYTES = 32 * 1024 };
    ekv_config_t cfg;
    CHECK_RC(ekv_config_init(&cfg, 1, KV_HEADS, HEAD_DIM), EKV_OK);
    cfg.page_tokens = PAGE;
    cfg.k_format = (ekv_format_t){.kind = EKV_FORMAT_INT8, .group = HEAD_DIM};
    cfg.v_format = (ekv_format_t){.kind = EKV_FORMAT_F16};
    cfg.allocator = EKV_ALLOC_BITMAP;
    ekv_plan_t plan;
    CHECK_RC(ekv_plan_split(&cfg, BUF_BYTES, &plan), EKV_OK);
    CHECK(plan.split_bytes <= BUF_BYTES);
    CHECK_RC(ekv_cache_create_split(&q8, &cfg, buf, BUF_BYTES), EKV_OK);
    ekv_seq_t s;
    CHECK_RC(ekv_seq_create(&q8, EKV_SEQ_CONTIGUOUS, &s), EKV_OK);
    CHECK_RC(ekv_seq_reserve(&q8, s, 6, NULL), EKV_OK);
    static float rows[6 * ROW], back[6 * ROW];
    make_rows(rows, 6, 0, 1.0f);
    CHECK_RC(ekv_write_kv_f32(&q8, s, 0, 0, rows, rows, 6 * ROW), EKV_OK);
    CHECK_RC(ekv_read_f32(&q8, s, 0, EKV_K, 0, back, 6 * ROW), EKV_OK);
    float max_err = 0.0f;
    for (int i = 0; i < 6 * ROW; i++) {
        float e = fabsf(back[i] - rows[i]);
        if (e > max_err) max_err = e;
    }
    CHECK(max_err < 0.02f); /* int8 with one scale per head */
    ekv_segment_t v[4], sc[4];
    size_t nv, ns;
    CHECK_RC(ekv_read_view(&q8, NULL, NULL, s, 0, EKV_K, v, 4, sc, 4, &nv, &ns), EKV_OK);
    CHECK(nv == 1 && ns == 1 && v[0].pages == 2);
    CHECK_RC(ekv_read_view(&q8, NULL, NULL, s, 0, EKV_K, v, 4, sc, 0, &nv, &ns), EKV_ERR_BUFFER_TOO_SMALL);
    CHECK(ns == 1);
    CHECK_RC(ekv_cache_destroy(&q8), EKV_OK);
}

/* Issue 42, item 6: what the header states about int8 keys. With EKV_FORMAT_INT8 keys (here
 * ggml Q8_0, group 32) ekv_attention scores each key against the query rounded once per row to
 * 16-bit codes per key group: code = round_half_away(x * 32767 / amax) with the group's amax =
 * max|x|, value code * amax / 32767. So ekv_attention equals a dense reference over the keys
 * read back (ekv_read_f32) with the query so rounded, within f32 rounding, while a dense
 * reference with the exact query differs by more -- but by no more than the documented
 * rounding allows: |dq| <= amax / 65534 per element bounds each score's change ds, and a
 * softmax output moves by at most 2 * max|ds| * max|v|. */
enum { QK_HEADS = 2, QK_DIM = 64, QK_Q = 4, QK_PAGE = 16, QK_GROUP = 32, QK_N = 48, QK_ROWS = 8, QK_ROW = QK_HEADS * QK_DIM };

static uint32_t qk_state = 12345u;
static float qk_rand(float amp) { /* xorshift32: uniform in [-amp, amp) */
    qk_state ^= qk_state << 13;
    qk_state ^= qk_state >> 17;
    qk_state ^= qk_state << 5;
    return amp * ((float)(qk_state >> 8) * (2.0f / 16777216.0f) - 1.0f);
}

/* The query row of one head as ekv_attention scores it against int8 keys (documented in
 * edgekv.h, ekv_attention): per group of g values, codes round(x * (32767 / amax)) half away
 * from zero (roundf), each worth amax / 32767. */
static void qk_round_query(const float *q, float *out, int n, int g) {
    for (int b = 0; b < n; b += g) {
        float amax = 0.0f;
        for (int i = b; i < b + g; i++) amax = fmaxf(amax, fabsf(q[i]));
        float id = 32767.0f / amax, step = amax / 32767.0f;
        for (int i = b; i < b + g; i++) out[i] = roundf(q[i] * id) * step;
    }
}

/* Causal attention of one query row (all heads) at position t over keys [0, t], in double. */
static void qk_reference(const float *k, const float *v, const float *q, int t, float scale, double *out, double *scores_out) {
    for (int qh = 0; qh < QK_Q; qh++) {
        int kh = qh / (QK_Q / QK_HEADS);
        double s[QK_N], mx = -INFINITY, sum = 0.0;
        for (int j = 0; j <= t; j++) {
            double d = 0.0;
            for (int i = 0; i < QK_DIM; i++) d += (double)q[qh * QK_DIM + i] * (double)k[(j * QK_HEADS + kh) * QK_DIM + i];
            s[j] = d * (double)scale;
            if (scores_out) scores_out[qh * QK_N + j] = s[j];
            if (s[j] > mx) mx = s[j];
        }
        for (int j = 0; j <= t; j++) { s[j] = exp(s[j] - mx); sum += s[j]; }
        for (int i = 0; i < QK_DIM; i++) {
            double acc = 0.0;
            for (int j = 0; j <= t; j++) acc += s[j] * (double)v[(j * QK_HEADS + kh) * QK_DIM + i];
            out[qh * QK_DIM + i] = acc / sum;
        }
    }
}

static void test_int8_keys_score_a_rounded_query(void) {
    static ekv_cache_t qk;
    static unsigned char data_raw_qk[48 * 1024 + 64], meta_raw_qk[4 * 1024 + 64];
    ekv_config_t cfg;
    CHECK_RC(ekv_config_init(&cfg, 1, QK_HEADS, QK_DIM), EKV_OK);
    cfg.page_tokens = QK_PAGE;
    cfg.max_seqs = 1;
    cfg.max_seq_tokens = QK_N;
    cfg.k_format = (ekv_format_t){.kind = EKV_FORMAT_INT8, .group = QK_GROUP}; /* ggml Q8_0 */
    ekv_plan_t plan;
    CHECK_RC(ekv_plan_pages(&cfg, QK_N / QK_PAGE, &plan), EKV_OK);
    CHECK(plan.data_bytes <= 48 * 1024 && plan.meta_bytes <= 4 * 1024);
    CHECK_RC(ekv_cache_create(&qk, &cfg, ALIGN_UP(data_raw_qk, 64), plan.data_bytes, ALIGN_UP(meta_raw_qk, 64), plan.meta_bytes), EKV_OK);
    ekv_seq_t s;
    CHECK_RC(ekv_seq_create(&qk, EKV_SEQ_PAGED, &s), EKV_OK);
    CHECK_RC(ekv_seq_reserve(&qk, s, QK_N, NULL), EKV_OK);

    static float k[QK_N * QK_ROW], v[QK_N * QK_ROW], kq[QK_N * QK_ROW], vq[QK_N * QK_ROW];
    for (int i = 0; i < QK_N * QK_ROW; i++) k[i] = qk_rand(3.0f);
    for (int i = 0; i < QK_N * QK_ROW; i++) v[i] = qk_rand(1.0f);
    CHECK_RC(ekv_write_kv_f32(&qk, s, 0, 0, k, v, QK_N * QK_ROW), EKV_OK);
    /* What attention computes over: the stored values (K dequantized: code * f16 scale). */
    CHECK_RC(ekv_read_f32(&qk, s, 0, EKV_K, 0, kq, QK_N * QK_ROW), EKV_OK);
    CHECK_RC(ekv_read_f32(&qk, s, 0, EKV_V, 0, vq, QK_N * QK_ROW), EKV_OK);
    CHECK(memcmp(v, vq, sizeof v) == 0); /* f32 values are stored as written */

    /* A prefill block of QK_ROWS query rows at the last positions. */
    enum { QROW = QK_Q * QK_DIM, T0 = QK_N - QK_ROWS };
    static float q[QK_ROWS * QROW], qr[QROW], out[QK_ROWS * QROW], scratch[8192];
    for (int i = 0; i < QK_ROWS * QROW; i++) q[i] = qk_rand(3.0f);
    ekv_attention_params_t params;
    CHECK_RC(ekv_attention_params_init(&params, QK_Q, QK_DIM), EKV_OK);
    size_t need = 0;
    CHECK_RC(ekv_cache_attention_scratch_len(&qk, QK_Q, &need), EKV_OK);
    need += ekv_attention_block_scratch_len(QK_Q, QK_PAGE, QK_DIM, QK_ROWS);
    CHECK(need <= sizeof scratch / sizeof scratch[0]);
    CHECK_RC(ekv_attention(&qk, s, 0, T0, q, QK_ROWS * QROW, out, QK_ROWS * QROW, &params, scratch, need), EKV_OK);

    double max_v = 0.0;
    for (int i = 0; i < QK_N * QK_ROW; i++) max_v = fmax(max_v, fabs((double)vq[i]));
    double rounded_err = 0.0, dense_err = 0.0, worst_share = 0.0;
    static double want_r[QROW], want_d[QROW], s_r[QK_Q * QK_N], s_d[QK_Q * QK_N];
    for (int r = 0; r < QK_ROWS; r++) {
        const float *qrow = q + r * QROW;
        int t = T0 + r;
        for (int h = 0; h < QK_Q; h++) qk_round_query(qrow + h * QK_DIM, qr + h * QK_DIM, QK_DIM, QK_GROUP);
        qk_reference(kq, vq, qr, t, params.scale, want_r, s_r);
        qk_reference(kq, vq, qrow, t, params.scale, want_d, s_d);
        /* The documented rounding moves each score by ds (|ds| <= scale * sum over groups of
         * amax / 65534 * sum |k|); softmax weights then change by a factor within
         * exp(+-2 max|ds|), so an output moves by at most (exp(2 max|ds|) - 1) * max|v|. */
        double max_ds = 0.0, row_err = 0.0;
        for (int h = 0; h < QK_Q; h++)
            for (int j = 0; j <= t; j++) max_ds = fmax(max_ds, fabs(s_r[h * QK_N + j] - s_d[h * QK_N + j]));
        double bound = expm1(2.0 * max_ds) * max_v + 2e-6; /* plus f32 rounding */
        for (int i = 0; i < QROW; i++) {
            double o = (double)out[r * QROW + i];
            rounded_err = fmax(rounded_err, fabs(o - want_r[i]));
            row_err = fmax(row_err, fabs(o - want_d[i]));
        }
        dense_err = fmax(dense_err, row_err);
        worst_share = fmax(worst_share, row_err / bound);
    }
    printf("int8 keys: max |error| vs the reference with the query rounded to 16-bit codes %g, "
           "vs the dense reference %g (at most %.2f of the documented rounding's bound)\n",
           rounded_err, dense_err, worst_share);
    CHECK(rounded_err < 2e-6);            /* equal within f32 rounding */
    CHECK(dense_err > 8.0 * rounded_err); /* the query's rounding is what a dense check sees */
    CHECK(worst_share <= 1.0);            /* and no more than the documented rounding allows */
    CHECK_RC(ekv_cache_destroy(&qk), EKV_OK);
}

static void fill_f(float *p, size_t n, float v) {
    for (size_t i = 0; i < n; i++) p[i] = v;
}
static int all_f(const float *p, size_t n, float v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

/* Maintenance that succeeds fail_after_n times, then fails. */
static int fail_after_n;
static int fail_after(void *ctx, void *addr, size_t len) {
    (void)ctx; (void)addr; (void)len;
    if (fail_after_n == 0) return 9;
    fail_after_n--;
    return 0;
}

/* Issue 22, item 1: every failing call that takes an output leaves it as it was. */
static void test_failed_calls_write_no_output(void) {
    enum { N = 16, QN = 3 * Q_HEADS * HEAD_DIM };
    static float k[N * ROW];
    ekv_seq_t s, t;
    uint16_t released = 0;
    make_rows(k, N, 0, 0.7f);
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &s), EKV_OK);
    CHECK_RC(ekv_seq_reserve(&cache, s, N, NULL), EKV_OK);
    for (uint16_t l = 0; l < LAYERS; l++) CHECK_RC(ekv_write_kv_f32(&cache, s, l, 0, k, k, N * ROW), EKV_OK);
    /* Window 4 for queries from position 13 on: pages 0 and 1 are released. */
    CHECK_RC(ekv_seq_slide(&cache, s, 0, 4, 13, &released), EKV_OK);
    CHECK(released == 2);

    /* Attention needing a released key: neither out nor scratch is written. */
    ekv_attention_params_t p;
    CHECK_RC(ekv_attention_params_init(&p, Q_HEADS, HEAD_DIM), EKV_OK);
    static float q[QN], out[QN], scratch[128];
    size_t scratch_len = 0;
    CHECK_RC(ekv_cache_attention_scratch_len(&cache, Q_HEADS, &scratch_len), EKV_OK);
    CHECK(scratch_len == ekv_attention_scratch_len(Q_HEADS, PAGE, HEAD_DIM) && scratch_len <= 128);
    fill_f(q, QN, 0.25f);
    fill_f(out, QN, 9.0f);
    fill_f(scratch, 128, -1.0f);
    CHECK_RC(ekv_attention(&cache, s, 0, 13, q, QN, out, QN, &p, scratch, scratch_len), EKV_ERR_POSITION_OUT_OF_RANGE);
    CHECK(all_f(out, QN, 9.0f) && all_f(scratch, 128, -1.0f));
    p.window_size = 4; /* the window the pages were released under: fine */
    CHECK_RC(ekv_attention(&cache, s, 0, 13, q, QN, out, QN, &p, scratch, scratch_len), EKV_OK);

    /* Reading or gathering released or missing positions. */
    float back[2 * ROW];
    fill_f(back, 2 * ROW, 9.0f);
    CHECK_RC(ekv_read_f32(&cache, s, 0, EKV_K, 2, back, 2 * ROW), EKV_ERR_POSITION_OUT_OF_RANGE);
    CHECK(all_f(back, 2 * ROW, 9.0f));
    static float staging_raw[4 * ROW + 8];
    float *staging = ALIGN_UP(staging_raw, 32);
    float row[ROW];
    uint32_t rows = 77;
    const uint32_t starts[3] = {0, 6, UINT32_MAX};
    for (int i = 0; i < 3; i++) {
        fill_f(staging, 4 * ROW, 9.0f);
        fill_f(row, ROW, 9.0f);
        CHECK_RC(ekv_gather_f32(&cache, NULL, s, 0, EKV_K, starts[i], staging, 4 * ROW, row, ROW, &rows), EKV_ERR_POSITION_OUT_OF_RANGE);
        CHECK(all_f(staging, 4 * ROW, 9.0f) && all_f(row, ROW, 9.0f) && rows == 77);
    }

    /* Views whose maintenance fails at once or after some lines: no segments, counts,
     * offsets or region. */
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &t), EKV_OK);
    CHECK_RC(ekv_seq_reserve(&cache, t, 3 * PAGE, NULL), EKV_OK);
    ekv_maintenance_t bad = {.ctx = NULL, .line_size = 32, .clean = fail_after, .invalidate = fail_after, .clean_invalidate = fail_after};
    ekv_segment_t v[4], sc[4], junk;
    size_t n_seg = 0;
    CHECK_RC(ekv_segments(&cache, NULL, t, 1, EKV_POOL_V_VALUES, v, 4, &n_seg), EKV_OK);
    memset(&junk, 0x5a, sizeof junk);
    for (int ok = 0; ok < (int)n_seg; ok++) {
        size_t nv = 77, ns = 77;
        for (int i = 0; i < 4; i++) v[i] = sc[i] = junk;
        fail_after_n = ok;
        CHECK_RC(ekv_read_view(&cache, NULL, &bad, t, 1, EKV_V, v, 4, sc, 4, &nv, &ns), EKV_ERR_MAINTENANCE);
        CHECK(nv == 77 && ns == 77 && memcmp(&v[0], &junk, sizeof junk) == 0 && memcmp(&v[3], &junk, sizeof junk) == 0);
    }
    for (int ok = 0; ok < 3; ok++) {
        uint32_t offs[4] = {7, 7, 7, 7};
        ekv_region_t region, before;
        memset(&region, 0x5a, sizeof region);
        before = region;
        fail_after_n = ok;
        CHECK_RC(ekv_bind_region(&cache, NULL, &bad, t, 1, EKV_K, offs, 4, NULL, 0, &region), EKV_ERR_MAINTENANCE);
        CHECK(offs[0] == 7 && offs[1] == 7 && offs[2] == 7 && memcmp(&region, &before, sizeof region) == 0);
    }

    /* Unknown sequences: the count outputs stay as they were too. */
    size_t n = 77;
    uint16_t table[4] = {7, 7, 7, 7};
    CHECK_RC(ekv_segments(&cache, NULL, (ekv_seq_t)0xdead, 0, 0, v, 4, &n), EKV_ERR_UNKNOWN_SEQUENCE);
    CHECK(n == 77);
    CHECK_RC(ekv_seq_page_table(&cache, (ekv_seq_t)0xdead, table, 4, &n), EKV_ERR_UNKNOWN_SEQUENCE);
    CHECK(n == 77 && table[0] == 7);

    /* Ingest into released positions: refused before the invalidate. */
    ekv_maintenance_t m = {.ctx = NULL, .line_size = 32, .clean = count_clean, .invalidate = count_invalidate, .clean_invalidate = count_invalidate};
    invalidates = 0;
    CHECK_RC(ekv_ingest_f32(&cache, &m, s, 0, EKV_V, 4, staging, 2 * ROW, &rows), EKV_ERR_POSITION_OUT_OF_RANGE);
    CHECK(invalidates == 0 && rows == 77);
    CHECK_RC(ekv_seq_free(&cache, t), EKV_OK);
    CHECK_RC(ekv_seq_free(&cache, s), EKV_OK);
}

/* A second, small cache (exactly `pages` pages) in its own storage and arenas. */
static ekv_cache_t small;
static unsigned char small_data_raw[8 * 1024 + 64], small_meta_raw[8 * 1024 + 64];

static void small_create(const ekv_config_t *cfg, size_t pages) {
    ekv_plan_t plan;
    CHECK_RC(ekv_plan_pages(cfg, pages, &plan), EKV_OK);
    CHECK(plan.data_bytes <= 8 * 1024 && plan.meta_bytes <= 8 * 1024);
    CHECK_RC(ekv_cache_create(&small, cfg, ALIGN_UP(small_data_raw, 64), plan.data_bytes, ALIGN_UP(small_meta_raw, 64), plan.meta_bytes), EKV_OK);
}

/* Issue 22, item 2: after truncating a fork into a shared page, reserve copies that page now
 * (or fails with nothing changed), so the writes into the reserved positions cannot fail. */
static void test_reserve_secures_copy_on_write(const ekv_config_t *cfg) {
    static float rows[12 * ROW], back[ROW];
    make_rows(rows, 12, 0, 2.0f);
    for (unsigned avail = 0; avail < 3; avail++) {
        ekv_seq_t parent, fork, hog;
        uint32_t first = 99;
        ekv_stats_t st;
        ekv_seq_info_t info;
        small_create(cfg, 6);
        CHECK_RC(ekv_seq_create(&small, EKV_SEQ_PAGED, &parent), EKV_OK);
        CHECK_RC(ekv_seq_reserve(&small, parent, 12, NULL), EKV_OK);
        for (uint16_t l = 0; l < LAYERS; l++) CHECK_RC(ekv_write_kv_f32(&small, parent, l, 0, rows, rows, 12 * ROW), EKV_OK);
        CHECK_RC(ekv_seq_fork(&small, parent, &fork), EKV_OK);
        CHECK_RC(ekv_seq_truncate(&small, fork, 6), EKV_OK); /* its tail: page 1, shared */
        CHECK_RC(ekv_cache_stats(&small, &st), EKV_OK);
        CHECK_RC(ekv_seq_create(&small, EKV_SEQ_PAGED, &hog), EKV_OK);
        CHECK_RC(ekv_seq_reserve(&small, hog, (uint32_t)(st.pages_free - avail) * PAGE, NULL), EKV_OK);
        /* Positions 6..9: the copy of page 1 plus page 2. */
        ekv_status_t rc = ekv_seq_reserve(&small, fork, 3, &first);
        if (avail < 2) {
            CHECK_RC(rc, EKV_ERR_OUT_OF_PAGES);
            CHECK_RC(ekv_seq_info(&small, fork, &info), EKV_OK);
            CHECK(first == 99 && info.len == 6 && info.pages == 2);
        } else {
            CHECK_RC(rc, EKV_OK);
            CHECK(first == 6);
            for (uint16_t l = 0; l < LAYERS; l++) CHECK_RC(ekv_write_kv_f32(&small, fork, l, 6, rows, rows, 3 * ROW), EKV_OK);
            CHECK_RC(ekv_read_f32(&small, parent, 1, EKV_V, 6, back, ROW), EKV_OK);
            CHECK(memcmp(back, rows + 6 * ROW, sizeof back) == 0); /* the parent keeps its row */
        }
        CHECK_RC(ekv_cache_destroy(&small), EKV_OK);
    }
}

/* Issue 22, item 3: a handle from an earlier cache in the same storage, or from another live
 * cache, is EKV_ERR_UNKNOWN_SEQUENCE. */
static void test_handles_bound_to_instance(const ekv_config_t *cfg) {
    ekv_seq_t old, fresh, mine;
    ekv_seq_info_t info;
    small_create(cfg, 4);
    CHECK_RC(ekv_seq_create(&small, EKV_SEQ_PAGED, &old), EKV_OK);
    CHECK_RC(ekv_cache_destroy(&small), EKV_OK);
    small_create(cfg, 4);
    CHECK_RC(ekv_seq_create(&small, EKV_SEQ_PAGED, &fresh), EKV_OK);
    CHECK((old & 0xffffffffu) == (fresh & 0xffffffffu) && old != fresh); /* same slot and generation */
    CHECK_RC(ekv_seq_info(&small, old, &info), EKV_ERR_UNKNOWN_SEQUENCE);
    CHECK_RC(ekv_seq_free(&small, old), EKV_ERR_UNKNOWN_SEQUENCE);
    CHECK_RC(ekv_seq_info(&small, fresh, &info), EKV_OK);
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &mine), EKV_OK);
    CHECK_RC(ekv_seq_info(&small, mine, &info), EKV_ERR_UNKNOWN_SEQUENCE);
    CHECK_RC(ekv_seq_info(&cache, fresh, &info), EKV_ERR_UNKNOWN_SEQUENCE);
    CHECK_RC(ekv_seq_free(&cache, mine), EKV_OK);
    CHECK_RC(ekv_cache_destroy(&small), EKV_OK);
}

/* Issue 22, item 4 (and 5's per-cache scratch query): one mistake, one code. */
static void test_one_mistake_one_code(void) {
    ekv_seq_t s;
    static float rows[2 * ROW];
    static float staging_raw[2 * ROW + 8];
    float *staging = ALIGN_UP(staging_raw, 32);
    float row[ROW];
    size_t len = 0;
    make_rows(rows, 2, 0, 1.0f);
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &s), EKV_OK);
    CHECK_RC(ekv_seq_reserve(&cache, s, 5, NULL), EKV_OK);
    /* Past max_seq_tokens (64), however far: SEQUENCE_FULL. */
    const uint32_t big[4] = {60, 1000, UINT32_MAX - 4, UINT32_MAX};
    for (int i = 0; i < 4; i++) CHECK_RC(ekv_seq_reserve(&cache, s, big[i], NULL), EKV_ERR_SEQUENCE_FULL);
    /* Rows past the sequence, however far: POSITION_OUT_OF_RANGE for write, ingest, gather. */
    const uint32_t starts[4] = {4, 5, UINT32_MAX - 1, UINT32_MAX};
    for (int i = 0; i < 4; i++) {
        CHECK_RC(ekv_write_f32(&cache, s, 0, EKV_K, starts[i], rows, 2 * ROW), EKV_ERR_POSITION_OUT_OF_RANGE);
        memcpy(staging, rows, sizeof rows);
        CHECK_RC(ekv_ingest_f32(&cache, NULL, s, 0, EKV_K, starts[i], staging, 2 * ROW, NULL), EKV_ERR_POSITION_OUT_OF_RANGE);
        CHECK_RC(ekv_gather_f32(&cache, NULL, s, 0, EKV_K, starts[i], staging, 2 * ROW, row, ROW, NULL), EKV_ERR_POSITION_OUT_OF_RANGE);
    }
    CHECK_RC(ekv_cache_attention_scratch_len(&cache, 3, &len), EKV_ERR_HEAD_MISMATCH);
    CHECK_RC(ekv_cache_attention_scratch_len(&cache, Q_HEADS, NULL), EKV_ERR_NULL);
    CHECK_RC(ekv_cache_attention_scratch_len(&small, Q_HEADS, &len), EKV_ERR_BAD_HANDLE);
    CHECK_RC(ekv_seq_free(&cache, s), EKV_OK);
}

/* Issue 22, item 5: snapshot and restore through a RAM buffer, the ABI version. */
static void test_snapshot_ram(const ekv_config_t *cfg) {
    enum { N = 6 };
    static float rows[N * ROW], a[N * ROW], b[N * ROW];
    static unsigned char image[16 * 1024];
    uint32_t tokens[N], back[8] = {0};
    size_t need = 0, got = 0, n = 77;
    ekv_seq_t s, r = 77;
    make_rows(rows, N, 0, 1.5f);
    for (int i = 0; i < N; i++) tokens[i] = 500u + (uint32_t)i;
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &s), EKV_OK);
    CHECK_RC(ekv_seq_reserve(&cache, s, N, NULL), EKV_OK);
    for (uint16_t l = 0; l < LAYERS; l++) CHECK_RC(ekv_write_kv_f32(&cache, s, l, 0, rows, rows, N * ROW), EKV_OK);
    CHECK_RC(ekv_snapshot_size(&cache, s, &need), EKV_OK);
    CHECK(need > 0 && need <= sizeof image);
    memset(image, 0x77, sizeof image);
    CHECK_RC(ekv_snapshot_to_buffer(&cache, s, tokens, N, 42, image, need - 1, &got), EKV_ERR_BUFFER_TOO_SMALL);
    CHECK(got == need && image[0] == 0x77 && image[need - 2] == 0x77);
    CHECK_RC(ekv_snapshot_to_buffer(&cache, s, tokens, N - 1, 42, image, need, &got), EKV_ERR_LENGTH_MISMATCH);
    CHECK(image[0] == 0x77);
    CHECK_RC(ekv_snapshot_to_buffer(&cache, s, tokens, N, 42, image, need, &got), EKV_OK);
    CHECK(got == need);

    small_create(cfg, 8);
    CHECK_RC(ekv_restore_from_buffer(&small, image, need, 41, back, 8, &n, &r), EKV_ERR_FINGERPRINT_MISMATCH);
    image[need - 9] ^= 1;
    CHECK_RC(ekv_restore_from_buffer(&small, image, need, 42, back, 8, &n, &r), EKV_ERR_CRC_MISMATCH);
    image[need - 9] ^= 1;
    CHECK_RC(ekv_restore_from_buffer(&small, image, need, 42, back, 2, &n, &r), EKV_ERR_LENGTH_MISMATCH);
    CHECK(n == 77 && r == 77 && back[0] == 0);
    CHECK_RC(ekv_restore_from_buffer(&small, image, need, 42, back, 8, &n, &r), EKV_OK);
    CHECK(n == N && back[0] == 500u && back[N - 1] == 500u + N - 1);
    CHECK_RC(ekv_read_f32(&cache, s, 1, EKV_V, 0, a, N * ROW), EKV_OK);
    CHECK_RC(ekv_read_f32(&small, r, 1, EKV_V, 0, b, N * ROW), EKV_OK);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_RC(ekv_cache_destroy(&small), EKV_OK);
    CHECK_RC(ekv_seq_free(&cache, s), EKV_OK);
}

#if defined(EDGEKV_ETHOSU)
static int flushes;
static int count_any(void *ctx, void *addr, size_t len) { (void)ctx; (void)addr; (void)len; flushes++; return 0; }
static void whole(void *ctx) { *(int *)ctx += 100; }

static void test_ethosu(void) {
    static const ekv_maintenance_t m = {.line_size = 32, .clean = count_any, .invalidate = count_any, .clean_invalidate = count_any};
    static int whole_calls;
    static ekv_ethosu_hooks_t hooks;
    hooks.maint = &m;
    hooks.clean_all = whole;
    hooks.clean_invalidate_all = whole;
    hooks.ctx = &whole_calls;
    hooks.regions[1] = (ekv_address_map_t){.kind = EKV_MAP_OFFSET, .window = {.cpu_base = 0x20000000u, .len = 0x10000, .dev_base = 0x30000000u}};
    ekv_ethosu_last_error();
    CHECK(ethosu_address_remap(0x20000040u, 1) == 0x20000040u); /* not registered yet: unchanged */
    CHECK_RC(ekv_ethosu_last_error(), EKV_ERR_NOT_REGISTERED);
    CHECK_RC(ekv_ethosu_register(&hooks), EKV_OK);
    CHECK(ethosu_address_remap(0x20000040u, 1) == 0x30000040u);
    CHECK(ethosu_address_remap(0x20000040u, 0) == 0x20000040u);
    flushes = 0;
    ethosu_flush_dcache((uint32_t *)(void *)data_arena, 100);         /* expanded to 4 lines: 1 call */
    ethosu_invalidate_dcache((uint32_t *)(void *)(data_arena + 4), 100); /* edges + middle: 3 calls */
    CHECK(flushes == 4);
    ethosu_flush_dcache(NULL, 0);
    ethosu_invalidate_dcache(NULL, 0);
    CHECK(whole_calls == 200);
    CHECK_RC(ekv_ethosu_last_error(), EKV_OK);
    static ekv_ethosu_hooks_t bad;
    bad = hooks;
    bad.regions[3] = (ekv_address_map_t){.kind = EKV_MAP_OFFSET, .window = {.cpu_base = 0, .len = 0}};
    CHECK_RC(ekv_ethosu_register(&bad), EKV_ERR_EMPTY_WINDOW);
    CHECK_RC(ekv_ethosu_register(NULL), EKV_OK);
}
#endif

int main(void) {
    ekv_config_t cfg;
    ekv_plan_t plan;
    data_arena = ALIGN_UP(data_raw, 64);
    meta_arena = ALIGN_UP(meta_raw, 64);
    CHECK(ekv_abi_version() == EKV_ABI_VERSION); /* header and library agree */
    test_sizes_and_config(&cfg, &plan);
    test_bad_handles_and_create(&cfg);
    test_sequences_rows_attention();
    test_prefix();
    test_device_views();
    test_int8_split_cache();
    test_int8_keys_score_a_rounded_query();
    test_failed_calls_write_no_output();
    test_reserve_secures_copy_on_write(&cfg);
    test_handles_bound_to_instance(&cfg);
    test_one_mistake_one_code();
    test_snapshot_ram(&cfg);
#if defined(EDGEKV_ETHOSU)
    test_ethosu();
#endif
    CHECK(strcmp(ekv_strerror(EKV_ERR_STALE_HIT), "prefix hit is stale: look up again") == 0);
    CHECK(strcmp(ekv_strerror(-12345), "not an edgekv status code") == 0);
    CHECK_RC(ekv_cache_destroy(&cache), EKV_OK);
    CHECK_RC(ekv_cache_destroy(&cache), EKV_ERR_BAD_HANDLE);
    ekv_seq_t s;
    CHECK_RC(ekv_seq_create(&cache, EKV_SEQ_PAGED, &s), EKV_ERR_BAD_HANDLE);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
