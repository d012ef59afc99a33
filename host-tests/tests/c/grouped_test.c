/* Layer groups through the edgekv C ABI: a Gemma-3-like cache (every third layer global in q8_0
 * pages, the others windowed over 8 positions in q4_0 pages) planned, created on heap arenas
 * sized by the planner, filled past the window token by token. Every attention output must equal
 * bit for bit that of a plain cache of the group's format (with the window given as a parameter
 * for windowed layers); windowed layers release their pages (reads of released positions fail,
 * the pages held stay bounded); a truncation back past the window fails and changes nothing;
 * gather / ingest / segments route to the layer's group; bad group configurations give their
 * precise codes; a grouped cache of one group equals ekv_cache_create's bit for bit. Built and
 * run by host-tests/tests/capi.rs (also under -fsanitize=address,undefined) and by the aarch64
 * stage; prints "N passed, N failed". */
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

#define EXPECT(expr, want)                                                           \
    do {                                                                             \
        ekv_status_t rc_ = (expr);                                                   \
        if (rc_ == (want)) {                                                         \
            passed++;                                                                \
        } else {                                                                     \
            failed++;                                                                \
            printf("FAIL %s:%d: %s = %d (%s), want %d\n", __FILE__, __LINE__, #expr,  \
                   (int)rc_, ekv_strerror(rc_), (int)(want));                        \
        }                                                                            \
    } while (0)

#define OK(expr) EXPECT(expr, EKV_OK)

enum { LAYERS = 6, KV_HEADS = 1, HEAD_DIM = 32, Q_HEADS = 2, PAGE = 4, ROW = KV_HEADS * HEAD_DIM };
enum { WINDOW = 8, TOKENS = 40, Q_ELEMS = Q_HEADS * HEAD_DIM };

static void *aligned(size_t align, size_t bytes) {
    void *p = NULL;
    size_t a = align < sizeof(void *) ? sizeof(void *) : align;
    return posix_memalign(&p, a, bytes ? bytes : 1) == 0 ? p : NULL;
}

/* A cache on heap memory. */
typedef struct {
    ekv_cache_t *cache;
    void *data, *meta;
} heap_cache;

static int alloc_cache(heap_cache *h, size_t data_align, size_t data_bytes, size_t meta_align,
                       size_t meta_bytes) {
    h->cache = aligned(ekv_cache_storage_align(), sizeof(ekv_cache_t));
    h->data = aligned(data_align, data_bytes);
    h->meta = aligned(meta_align, meta_bytes);
    if (!h->cache || !h->data || !h->meta) return 0;
    memset(h->cache, 0, sizeof(ekv_cache_t));
    return 1;
}

static void close_cache(heap_cache *h) {
    if (h->cache && ekv_cache_check(h->cache) == EKV_OK) OK(ekv_cache_destroy(h->cache));
    free(h->cache);
    free(h->data);
    free(h->meta);
}

/* A plain cache of one format for every layer (the reference). */
static int open_plain(heap_cache *h, const ekv_config_t *cfg) {
    ekv_plan_t plan;
    OK(ekv_plan_pages(cfg, 32, &plan));
    if (!alloc_cache(h, plan.data_align, plan.data_bytes, plan.meta_align, plan.meta_bytes)) return 0;
    OK(ekv_cache_create(h->cache, cfg, h->data, plan.data_bytes, h->meta, plan.meta_bytes));
    return 1;
}

static int open_grouped(heap_cache *h, const ekv_grouped_config_t *cfg, ekv_grouped_plan_t *plan) {
    OK(ekv_grouped_plan_for(cfg, TOKENS, 2, plan));
    if (!alloc_cache(h, plan->data_align, plan->data_bytes, plan->meta_align, plan->meta_bytes))
        return 0;
    OK(ekv_grouped_cache_create(h->cache, cfg, h->data, plan->data_bytes, h->meta, plan->meta_bytes));
    return 1;
}

static ekv_format_t format(uint32_t kind, uint16_t group) {
    ekv_format_t f;
    memset(&f, 0, sizeof f);
    f.kind = kind;
    f.group = group;
    return f;
}

static void kv_rows(uint32_t pos, uint16_t layer, float *k, float *v) {
    for (int i = 0; i < ROW; i++) {
        k[i] = (float)((pos * 7u + layer * 5u + (uint32_t)i * 3u) % 29u) / 16.0f - 0.9f;
        v[i] = (float)((pos * 3u + layer * 17u + (uint32_t)i * 5u) % 31u) / 8.0f - 1.9f;
    }
}

static void query(uint32_t pos, uint16_t layer, float *q) {
    for (int i = 0; i < Q_ELEMS; i++) q[i] = (float)((pos * 5u + layer * 3u + (uint32_t)i) % 23u) / 11.0f - 1.0f;
}

/* Gemma-3-like: layers 2 and 5 global (q8_0), the others windowed (q4_0). */
static ekv_grouped_config_t gemma_like(void) {
    ekv_grouped_config_t cfg;
    OK(ekv_grouped_config_init(&cfg, LAYERS, KV_HEADS, HEAD_DIM));
    cfg.base.page_tokens = PAGE;
    cfg.base.max_seq_tokens = 64;
    cfg.base.max_seqs = 2;
    cfg.base.k_format = format(EKV_FORMAT_Q4_0, 0);
    cfg.base.v_format = format(EKV_FORMAT_Q4_0, 0);
    cfg.window.enabled = 1;
    cfg.window.window = WINDOW;
    cfg.group_count = 1;
    cfg.groups[0].layers = EKV_LAYERS_EVERY;
    cfg.groups[0].first = 2;
    cfg.groups[0].count = 3;
    cfg.groups[0].k_format = format(EKV_FORMAT_INT8, 32);
    cfg.groups[0].v_format = format(EKV_FORMAT_INT8, 32);
    return cfg;
}

static int is_global(uint16_t layer) { return layer % 3 == 2; }

static void bad_configs(void) {
    ekv_grouped_plan_t plan;
    ekv_grouped_config_t c;

    /* Overlapping groups. */
    c = gemma_like();
    c.group_count = 2;
    c.groups[1] = c.groups[0];
    c.groups[1].layers = EKV_LAYERS_RUN;
    c.groups[1].first = 0;
    c.groups[1].count = 3; /* holds layer 2, as group 1 does */
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_LAYER_IN_TWO_GROUPS);
    /* Listed groups take every layer: the base group has none. */
    c = gemma_like();
    c.groups[0].layers = EKV_LAYERS_RUN;
    c.groups[0].first = 0;
    c.groups[0].count = LAYERS;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_EMPTY_GROUP);
    /* A window of 0, in the base group and in a listed one. */
    c = gemma_like();
    c.window.window = 0;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_INVALID_GROUP);
    c = gemma_like();
    c.groups[0].window.enabled = 1;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_INVALID_GROUP);
    /* Layers out of range. */
    c = gemma_like();
    c.groups[0].layers = EKV_LAYERS_RUN;
    c.groups[0].first = 4;
    c.groups[0].count = 3;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_GROUP_LAYER_OUT_OF_RANGE);
    c = gemma_like();
    c.groups[0].first = LAYERS;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_GROUP_LAYER_OUT_OF_RANGE);
    /* A run or period of 0. */
    c = gemma_like();
    c.groups[0].count = 0;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_INVALID_GROUP);
    /* Too many groups, an unknown layers kind, a nonzero unused group, a disabled window with
     * fields, the bitmap allocator. */
    c = gemma_like();
    c.group_count = EKV_MAX_LISTED_GROUPS + 1;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_TOO_MANY_GROUPS);
    c = gemma_like();
    c.groups[0].layers = 7;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_INVALID_ARGUMENT);
    c = gemma_like();
    c.groups[1].first = 1;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_INVALID_ARGUMENT);
    c = gemma_like();
    c.groups[0].window.sinks = 1;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_INVALID_ARGUMENT);
    c = gemma_like();
    c.base.allocator = EKV_ALLOC_BITMAP;
    EXPECT(ekv_grouped_plan(&c, 1 << 20, &plan), EKV_ERR_INVALID_ARGUMENT);
    EXPECT(ekv_grouped_plan(NULL, 1 << 20, &plan), EKV_ERR_NULL);
    c = gemma_like();
    EXPECT(ekv_grouped_plan(&c, 1 << 20, NULL), EKV_ERR_NULL);
    EXPECT(ekv_grouped_plan(&c, 100, &plan), EKV_ERR_ARENA_TOO_SMALL);
    EXPECT(ekv_grouped_plan_for(&c, 0, 1, &plan), EKV_ERR_ZERO_SIZE);

    /* A create with a bad configuration leaves the storage dead. */
    heap_cache h = {0};
    c = gemma_like();
    c.groups[0].first = LAYERS;
    if (alloc_cache(&h, 64, 1 << 16, 8, 1 << 16)) {
        EXPECT(ekv_grouped_cache_create(h.cache, &c, h.data, 1 << 16, h.meta, 1 << 16),
               EKV_ERR_GROUP_LAYER_OUT_OF_RANGE);
        EXPECT(ekv_cache_check(h.cache), EKV_ERR_BAD_HANDLE);
        /* Metadata too short for the object: a precise error too. */
        c = gemma_like();
        EXPECT(ekv_grouped_cache_create(h.cache, &c, h.data, 1 << 16, h.meta, 16),
               EKV_ERR_ARENA_TOO_SMALL);
        EXPECT(ekv_cache_check(h.cache), EKV_ERR_BAD_HANDLE);
    } else {
        CHECK(0);
    }
    close_cache(&h);
}

/* The context a grouped plan gives against the same arena with every layer global. */
static void plans(void) {
    ekv_grouped_config_t cfg = gemma_like();
    ekv_grouped_plan_t plan, global;
    cfg.base.max_seq_tokens = 4096;
    cfg.base.max_seqs = 1;
    OK(ekv_grouped_plan(&cfg, 64 << 10, &plan));
    ekv_grouped_config_t all = cfg;
    memset(&all.window, 0, sizeof all.window);
    OK(ekv_grouped_plan(&all, 64 << 10, &global));
    CHECK(plan.group_count == 2 && global.group_count == 2);
    CHECK(plan.data_bytes <= (64 << 10));
    /* The windowed group holds its bound; the global one the rest: a longer context. */
    CHECK(plan.groups[0].num_pages < plan.groups[1].num_pages);
    CHECK(plan.context_tokens == plan.groups[1].num_pages * PAGE);
    CHECK(plan.context_tokens > 2 * global.context_tokens);
    CHECK(plan.data_offset[0] == 0 && plan.data_offset[1] == plan.groups[0].data_bytes);
    printf("64 KiB: %u tokens of context grouped, %u all global\n", (unsigned)plan.context_tokens,
           (unsigned)global.context_tokens);
    /* The bytes for that context fit in the arena that gave it. */
    ekv_grouped_plan_t need;
    OK(ekv_grouped_plan_for(&cfg, plan.context_tokens, 1, &need));
    CHECK(need.data_bytes <= plan.data_bytes && need.context_tokens == plan.context_tokens);
}

static void fill_and_attend(void) {
    ekv_grouped_config_t cfg = gemma_like();
    ekv_grouped_plan_t plan;
    heap_cache g = {0}, w = {0}, f = {0};
    ekv_config_t wcfg = cfg.base, fcfg = cfg.base;
    fcfg.k_format = cfg.groups[0].k_format;
    fcfg.v_format = cfg.groups[0].v_format;
    if (!open_grouped(&g, &cfg, &plan) || !open_plain(&w, &wcfg) || !open_plain(&f, &fcfg)) {
        CHECK(0);
        goto out;
    }
    uint32_t group = 9;
    uint16_t index = 9;
    OK(ekv_layer_group(g.cache, 2, &group, &index));
    CHECK(group == 1 && index == 0);
    OK(ekv_layer_group(g.cache, 4, &group, &index));
    CHECK(group == 0 && index == 3);
    EXPECT(ekv_layer_group(g.cache, LAYERS, &group, NULL), EKV_ERR_LAYER_OUT_OF_RANGE);
    ekv_grouped_plan_t live;
    OK(ekv_grouped_cache_plan(g.cache, &live));
    CHECK(memcmp(&live, &plan, sizeof live) == 0);

    size_t scratch_len = 0, plain_len = 0;
    OK(ekv_cache_scratch_len(g.cache, Q_HEADS, 1, &scratch_len));
    OK(ekv_cache_scratch_len(w.cache, Q_HEADS, 1, &plain_len));
    CHECK(scratch_len == plain_len && scratch_len > 0);
    float *scratch = malloc(scratch_len * sizeof(float));
    if (!scratch) {
        CHECK(0);
        goto out;
    }
    ekv_seq_t s, sw, sf;
    OK(ekv_seq_create(g.cache, EKV_SEQ_PAGED, &s));
    OK(ekv_seq_create(w.cache, EKV_SEQ_PAGED, &sw));
    OK(ekv_seq_create(f.cache, EKV_SEQ_PAGED, &sf));
    ekv_attention_params_t p, windowed;
    OK(ekv_attention_params_init(&p, Q_HEADS, HEAD_DIM));
    windowed = p;
    windowed.window_size = WINDOW;
    float k[ROW], v[ROW], q[Q_ELEMS], got[Q_ELEMS], want[Q_ELEMS];
    int same = 1;
    for (uint32_t t = 0; t < TOKENS; t++) {
        uint32_t first = 0;
        OK(ekv_seq_reserve(g.cache, s, 1, &first));
        CHECK(first == t);
        OK(ekv_seq_reserve(w.cache, sw, 1, NULL));
        OK(ekv_seq_reserve(f.cache, sf, 1, NULL));
        for (uint16_t l = 0; l < LAYERS; l++) {
            kv_rows(t, l, k, v);
            OK(ekv_write_kv_f32(g.cache, s, l, t, k, v, ROW));
            OK(ekv_write_kv_f32(w.cache, sw, l, t, k, v, ROW));
            OK(ekv_write_kv_f32(f.cache, sf, l, t, k, v, ROW));
            query(t, l, q);
            /* The group's window applies: no window in the parameters. */
            OK(ekv_attention(g.cache, s, l, t, q, Q_ELEMS, got, Q_ELEMS, &p, scratch, scratch_len));
            if (is_global(l)) {
                OK(ekv_attention(f.cache, sf, l, t, q, Q_ELEMS, want, Q_ELEMS, &p, scratch, scratch_len));
            } else {
                OK(ekv_attention(w.cache, sw, l, t, q, Q_ELEMS, want, Q_ELEMS, &windowed, scratch,
                                 scratch_len));
            }
            same &= memcmp(got, want, sizeof got) == 0;
        }
    }
    CHECK(same);

    /* Released past the window in windowed layers, kept in global ones. */
    float row[ROW], ref[ROW];
    EXPECT(ekv_read_f32(g.cache, s, 0, EKV_K, 0, row, ROW), EKV_ERR_POSITION_OUT_OF_RANGE);
    OK(ekv_read_f32(g.cache, s, 2, EKV_K, 0, row, ROW));
    OK(ekv_read_f32(f.cache, sf, 2, EKV_K, 0, ref, ROW));
    CHECK(memcmp(row, ref, sizeof row) == 0);
    OK(ekv_read_f32(g.cache, s, 3, EKV_V, TOKENS - 1, row, ROW));
    OK(ekv_read_f32(w.cache, sw, 3, EKV_V, TOKENS - 1, ref, ROW));
    CHECK(memcmp(row, ref, sizeof row) == 0);
    ekv_stats_t st;
    OK(ekv_cache_stats(g.cache, &st));
    /* Global: every page of 40 positions; windowed: (8 + 1 - 2) / 4 rounded up, plus 1. */
    CHECK(st.pages_used <= TOKENS / PAGE + 3 && st.pages_used >= TOKENS / PAGE + 2);
    CHECK(st.sequences == 1 && st.tokens == TOKENS);
    ekv_seq_info_t info;
    OK(ekv_seq_info(g.cache, s, &info));
    CHECK(info.len == TOKENS && info.pages == TOKENS / PAGE);

    /* Truncating back past what the window kept: a precise error, nothing changed. */
    EXPECT(ekv_seq_truncate(g.cache, s, 20), EKV_ERR_TRUNCATE_BEYOND_WINDOW);
    OK(ekv_seq_info(g.cache, s, &info));
    CHECK(info.len == TOKENS);
    OK(ekv_read_f32(g.cache, s, 5, EKV_K, 20, row, ROW));

    /* Per-layer calls refuse a layer past the shape's; calls of one page table refuse. */
    kv_rows(0, 0, k, v);
    EXPECT(ekv_write_f32(g.cache, s, LAYERS, EKV_K, TOKENS - 1, k, ROW), EKV_ERR_LAYER_OUT_OF_RANGE);
    EXPECT(ekv_attention(g.cache, s, LAYERS, TOKENS - 1, q, Q_ELEMS, got, Q_ELEMS, &p, scratch,
                         scratch_len),
           EKV_ERR_LAYER_OUT_OF_RANGE);
    EXPECT(ekv_seq_slide(g.cache, s, 0, WINDOW, TOKENS, NULL), EKV_ERR_MULTIPLE_GROUPS);
    size_t image = 0;
    EXPECT(ekv_snapshot_size(g.cache, s, &image), EKV_ERR_MULTIPLE_GROUPS);
    ekv_plan_t one;
    EXPECT(ekv_cache_plan(g.cache, &one), EKV_ERR_MULTIPLE_GROUPS);

    /* Gather and segments route to the layer's group; ingest writes there (staging in whole
     * cache lines). */
    float *staging = aligned(64, 4 * ROW * sizeof(float)), gather_row[ROW];
    if (!staging) {
        CHECK(0);
        free(scratch);
        goto out;
    }
    uint32_t rows = 0;
    OK(ekv_gather_f32(g.cache, NULL, s, 5, EKV_K, 4, staging, 4 * ROW, gather_row, ROW, &rows));
    CHECK(rows == 4);
    OK(ekv_read_f32(f.cache, sf, 5, EKV_K, 4, ref, ROW));
    CHECK(memcmp(staging, ref, ROW * sizeof(float)) == 0);
    EXPECT(ekv_gather_f32(g.cache, NULL, s, 1, EKV_K, 4, staging, 4 * ROW, gather_row, ROW, NULL),
           EKV_ERR_POSITION_OUT_OF_RANGE);
    size_t count = 0;
    ekv_segment_t segs[16];
    OK(ekv_segments(g.cache, NULL, s, 2, EKV_POOL_K_VALUES, segs, 16, &count));
    CHECK(count >= 1);
    for (int i = 0; i < 2 * ROW; i++) staging[i] = (float)i / 64.0f;
    OK(ekv_ingest_f32(g.cache, NULL, s, 0, EKV_V, TOKENS - 2, staging, 2 * ROW, &rows));
    CHECK(rows == 2);
    OK(ekv_write_f32(w.cache, sw, 0, EKV_V, TOKENS - 2, staging, 2 * ROW));
    OK(ekv_read_f32(g.cache, s, 0, EKV_V, TOKENS - 1, row, ROW));
    OK(ekv_read_f32(w.cache, sw, 0, EKV_V, TOKENS - 1, ref, ROW));
    CHECK(memcmp(row, ref, sizeof row) == 0);

    /* Fork and free across groups. */
    ekv_seq_t child;
    OK(ekv_seq_fork(g.cache, s, &child));
    query(TOKENS - 1, 3, q);
    OK(ekv_attention(g.cache, child, 3, TOKENS - 1, q, Q_ELEMS, got, Q_ELEMS, &p, scratch, scratch_len));
    OK(ekv_attention(g.cache, s, 3, TOKENS - 1, q, Q_ELEMS, want, Q_ELEMS, &p, scratch, scratch_len));
    CHECK(memcmp(got, want, sizeof got) == 0);
    OK(ekv_seq_free(g.cache, child));
    OK(ekv_seq_free(g.cache, s));
    EXPECT(ekv_seq_free(g.cache, s), EKV_ERR_UNKNOWN_SEQUENCE);
    OK(ekv_cache_stats(g.cache, &st));
    CHECK(st.sequences == 0 && st.pages_used == 0);
    free(staging);
    free(scratch);
out:
    close_cache(&g);
    close_cache(&w);
    close_cache(&f);
}

/* A grouped cache of one group is the plain cache: the same plan, the same bits. */
static void one_group(void) {
    ekv_grouped_config_t cfg;
    OK(ekv_grouped_config_init(&cfg, LAYERS, KV_HEADS, HEAD_DIM));
    cfg.base.page_tokens = PAGE;
    cfg.base.max_seq_tokens = 64;
    cfg.base.max_seqs = 2;
    cfg.base.k_format = format(EKV_FORMAT_INT8, 16);
    heap_cache g = {0}, c = {0};
    ekv_grouped_plan_t plan;
    if (!open_grouped(&g, &cfg, &plan) || !open_plain(&c, &cfg.base)) {
        CHECK(0);
        goto out;
    }
    CHECK(plan.group_count == 1);
    ekv_grouped_plan_t live;
    OK(ekv_grouped_cache_plan(c.cache, &live));
    CHECK(live.group_count == 1 && live.groups[0].page_bytes == plan.groups[0].page_bytes);
    size_t n = 0;
    OK(ekv_cache_scratch_len(g.cache, Q_HEADS, 4, &n));
    float *scratch = malloc(n * sizeof(float));
    if (!scratch) {
        CHECK(0);
        goto out;
    }
    ekv_seq_t a, b;
    OK(ekv_seq_create(g.cache, EKV_SEQ_PAGED, &a));
    OK(ekv_seq_create(c.cache, EKV_SEQ_PAGED, &b));
    OK(ekv_seq_reserve(g.cache, a, 12, NULL));
    OK(ekv_seq_reserve(c.cache, b, 12, NULL));
    float k[ROW], v[ROW], q[4 * Q_ELEMS], got[4 * Q_ELEMS], want[4 * Q_ELEMS];
    for (uint32_t t = 0; t < 12; t++) {
        for (uint16_t l = 0; l < LAYERS; l++) {
            kv_rows(t, l, k, v);
            OK(ekv_write_kv_f32(g.cache, a, l, t, k, v, ROW));
            OK(ekv_write_kv_f32(c.cache, b, l, t, k, v, ROW));
        }
    }
    ekv_attention_params_t p;
    OK(ekv_attention_params_init(&p, Q_HEADS, HEAD_DIM));
    int same = 1;
    for (uint16_t l = 0; l < LAYERS; l++) {
        for (int r = 0; r < 4; r++) query(8 + (uint32_t)r, l, q + r * Q_ELEMS);
        OK(ekv_attention(g.cache, a, l, 8, q, 4 * Q_ELEMS, got, 4 * Q_ELEMS, &p, scratch, n));
        OK(ekv_attention(c.cache, b, l, 8, q, 4 * Q_ELEMS, want, 4 * Q_ELEMS, &p, scratch, n));
        same &= memcmp(got, want, sizeof got) == 0;
    }
    CHECK(same);
    free(scratch);
out:
    close_cache(&g);
    close_cache(&c);
}

int main(void) {
    if (ekv_abi_version() != EKV_ABI_VERSION) {
        printf("ABI mismatch\n");
        return 1;
    }
    bad_configs();
    plans();
    fill_and_attend();
    one_group();
    printf("grouped_test: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
