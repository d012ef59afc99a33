//! Grouped caches over the C ABI, called as C would: the object placed in the metadata arena,
//! per-layer routing, release past the window, the group codes, create after destroy in the
//! same storage. Small shapes, so Miri runs them quickly (the placement is unsafe code).

use core::ffi::c_void;
use core::ptr::null_mut;

use super::*;

const HEAD_DIM: u16 = 4;
const ROW: usize = HEAD_DIM as usize;

/// Three layers: 0 and 2 windowed over 4 positions, 1 global.
fn config() -> EkvGroupedConfig {
    let mut c = EkvGroupedConfig::default();
    // SAFETY: a valid, writable struct.
    let status = unsafe { ekv_grouped_config_init(&mut c, 3, 1, HEAD_DIM) };
    assert_eq!(status, EKV_OK);
    c.base.page_tokens = 4;
    c.base.max_seqs = 2;
    c.base.max_seq_tokens = 32;
    c.window = EkvWindow {
        enabled: 1,
        window: 4,
        ..EkvWindow::default()
    };
    c.group_count = 1;
    c.groups[0] = EkvLayerGroup {
        layers: EKV_LAYERS_RUN,
        first: 1,
        count: 1,
        ..EkvLayerGroup::default()
    };
    c
}

fn plan_of(c: &EkvGroupedConfig) -> Result<EkvGroupedPlan, EkvStatus> {
    let mut p = EkvGroupedPlan::default();
    // SAFETY: valid struct and output.
    match unsafe { ekv_grouped_plan_for(c, 16, 2, &mut p) } {
        EKV_OK => Ok(p),
        rc => Err(rc),
    }
}

#[test]
fn bad_groups_give_their_codes() {
    let mut c = config();
    c.window.window = 0;
    assert_eq!(plan_of(&c), Err(EKV_ERR_INVALID_GROUP));
    let mut c = config();
    c.groups[0].count = 3;
    assert_eq!(plan_of(&c), Err(EKV_ERR_GROUP_LAYER_OUT_OF_RANGE));
    let mut c = config();
    c.groups[0].first = 0;
    c.groups[0].count = 3;
    assert_eq!(plan_of(&c), Err(EKV_ERR_EMPTY_GROUP));
    let mut c = config();
    c.group_count = 2;
    c.groups[1] = c.groups[0];
    assert_eq!(plan_of(&c), Err(EKV_ERR_LAYER_IN_TWO_GROUPS));
    let mut c = config();
    c.group_count = 4;
    assert_eq!(plan_of(&c), Err(EKV_ERR_TOO_MANY_GROUPS));
    let mut c = config();
    c.groups[0].layers = EKV_LAYERS_EVERY;
    c.groups[0].count = 0;
    assert_eq!(plan_of(&c), Err(EKV_ERR_INVALID_GROUP));
    let mut c = config();
    c.window.reserved[1] = 1;
    assert_eq!(plan_of(&c), Err(EKV_ERR_INVALID_ARGUMENT));
}

#[test]
fn a_grouped_cache_routes_layers_and_releases_past_the_window() {
    let cfg = config();
    let plan = plan_of(&cfg).unwrap();
    assert_eq!(plan.group_count, 2);
    // Held through raw pointers only, as C holds them.
    let cache: *mut EkvCache = Box::into_raw(Box::new(EkvCache {
        opaque: [0; EKV_CACHE_STORAGE_WORDS],
    }));
    let data: *mut u64 =
        Box::into_raw(vec![0u64; plan.data_bytes / 8 + 8].into_boxed_slice()).cast();
    let meta: *mut u64 =
        Box::into_raw(vec![0u64; plan.meta_bytes / 8 + 1].into_boxed_slice()).cast();
    // The data arena aligned to 64 inside the allocation.
    let skew = (64 - data.addr() % 64) % 64;
    // SAFETY: `skew < 64` bytes into an allocation of `data_bytes + 64` bytes.
    let data_at = unsafe { data.cast::<u8>().add(skew) }.cast::<c_void>();
    let (d, m) = (plan.data_bytes, plan.meta_bytes);
    let mut scratch_len = 0usize;
    // SAFETY: every pointer is valid for its stated length until freed below, after destroy.
    unsafe {
        let meta = meta.cast::<c_void>();
        assert_eq!(
            ekv_grouped_cache_create(cache, &cfg, data_at, d, meta, m),
            EKV_OK
        );
        assert_eq!(ekv_cache_check(cache), EKV_OK);
        assert_eq!(ekv_cache_scratch_len(cache, 2, 1, &mut scratch_len), EKV_OK);
        let mut live = EkvGroupedPlan::default();
        assert_eq!(ekv_grouped_cache_plan(cache, &mut live), EKV_OK);
        assert_eq!(live, plan);
        let (mut group, mut index) = (9u32, 9u16);
        assert_eq!(ekv_layer_group(cache, 2, &mut group, &mut index), EKV_OK);
        assert_eq!((group, index), (0, 1));

        let mut s = 0;
        assert_eq!(ekv_seq_create(cache, EKV_SEQ_PAGED, &mut s), EKV_OK);
        let mut params = EkvAttentionParams::default();
        assert_eq!(ekv_attention_params_init(&mut params, 2, HEAD_DIM), EKV_OK);
        let mut scratch = vec![0f32; scratch_len];
        for t in 0..12u32 {
            assert_eq!(ekv_seq_reserve(cache, s, 1, null_mut()), EKV_OK);
            for layer in 0..3u16 {
                let k = [t as f32 + layer as f32; ROW];
                let v = [-(t as f32); ROW];
                let rc = ekv_write_kv_f32(cache, s, layer, t, k.as_ptr(), v.as_ptr(), ROW);
                assert_eq!(rc, EKV_OK);
                let q = [0.5f32; 2 * ROW];
                let mut out = [0f32; 2 * ROW];
                let rc = ekv_attention(
                    cache,
                    s,
                    layer,
                    t,
                    q.as_ptr(),
                    q.len(),
                    out.as_mut_ptr(),
                    out.len(),
                    &params,
                    scratch.as_mut_ptr(),
                    scratch.len(),
                );
                assert_eq!(rc, EKV_OK);
            }
        }
        let mut row = [0f32; ROW];
        let read = |layer, pos, row: &mut [f32; ROW]| {
            ekv_read_f32(cache, s, layer, EKV_K, pos, row.as_mut_ptr(), ROW)
        };
        assert_eq!(read(0, 0, &mut row), EKV_ERR_POSITION_OUT_OF_RANGE);
        assert_eq!(read(1, 0, &mut row), EKV_OK);
        assert_eq!(row, [1.0; ROW]);
        assert_eq!(read(2, 11, &mut row), EKV_OK);
        assert_eq!(row, [13.0; ROW]);
        assert_eq!(read(3, 11, &mut row), EKV_ERR_LAYER_OUT_OF_RANGE);
        assert_eq!(
            ekv_seq_truncate(cache, s, 2),
            EKV_ERR_TRUNCATE_BEYOND_WINDOW
        );
        let mut info = EkvSeqInfo::default();
        assert_eq!(ekv_seq_info(cache, s, &mut info), EKV_OK);
        assert_eq!(info.len, 12);
        let slide = ekv_seq_slide(cache, s, 0, 4, 12, null_mut());
        assert_eq!(slide, EKV_ERR_MULTIPLE_GROUPS);
        assert_eq!(ekv_seq_free(cache, s), EKV_OK);
        assert_eq!(ekv_cache_destroy(cache), EKV_OK);
        assert_eq!(ekv_cache_check(cache), EKV_ERR_BAD_HANDLE);
        // The same storage and arenas again, now as a cache of one group.
        let one = config().base;
        let rc = ekv_cache_create(cache, &one, data_at, d, meta, m);
        assert_eq!(rc, EKV_OK);
        let mut flat = EkvPlan::default();
        assert_eq!(ekv_cache_plan(cache, &mut flat), EKV_OK);
        assert_eq!(ekv_cache_destroy(cache), EKV_OK);
        drop(Box::from_raw(cache));
        let data = core::ptr::slice_from_raw_parts_mut(data, plan.data_bytes / 8 + 8);
        drop(Box::from_raw(data));
        let meta = core::ptr::slice_from_raw_parts_mut(meta.cast::<u64>(), plan.meta_bytes / 8 + 1);
        drop(Box::from_raw(meta));
    }
}
