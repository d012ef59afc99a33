//! Arenas in `static` memory: a `StaticCell` (whole buffer or never-initialized), a plain
//! `static` in a named linker section (as boards put arenas in `.axisram` or PSRAM), and one
//! static buffer split in two.

use core::mem::MaybeUninit;
use edgekv::{ArenaBuf, Bitmap, CacheConfig, FreeList, Kv, KvCache, SeqMode, Shape};
use static_cell::StaticCell;

const CFG: CacheConfig = CacheConfig::new(Shape {
    layers: 2,
    kv_heads: 1,
    head_dim: 8,
})
.with_sequences(2, 256);
const DATA: usize = 16 * 1024;
const PLAN: edgekv::Plan = match KvCache::<FreeList>::plan(&CFG, DATA) {
    Ok(p) => p,
    Err(_) => panic!("plan"),
};
const META: usize = PLAN.meta.total;

fn exercise<'a, A: edgekv::PageAllocator<'a>>(cache: &mut KvCache<'a, A>) {
    let s = cache.create_sequence(SeqMode::Paged).unwrap();
    let n = PLAN.token_capacity() as u32;
    cache.reserve(s, n).unwrap();
    for pos in 0..n {
        cache.write(s, 1, Kv::V, pos, &[pos as f32; 8]).unwrap();
    }
    let mut row = [0f32; 8];
    cache.read(s, 1, Kv::V, n - 1, &mut row).unwrap();
    assert_eq!(row, [(n - 1) as f32; 8]);
    assert_eq!(cache.stats().pages_free, 0);
}

#[test]
fn static_cell_arenas() {
    static DATA_CELL: StaticCell<ArenaBuf<DATA>> = StaticCell::new();
    static META_CELL: StaticCell<ArenaBuf<META>> = StaticCell::new();
    let data = ArenaBuf::from_uninit(DATA_CELL.uninit());
    let meta = META_CELL.init(ArenaBuf::new()).as_uninit_mut();
    let mut cache: KvCache<'static> = KvCache::new(CFG, data, meta).unwrap();
    exercise(&mut cache);
}

#[test]
fn linker_section_arena() {
    // A board would name its DMA-capable RAM here (e.g. ".axisram"); ELF hosts accept any name.
    // `link_section` counts as unsafe code: placing bytes is the linker's promise, not Rust's.
    #[allow(unsafe_code)]
    #[cfg_attr(target_os = "linux", unsafe(link_section = ".edgekv_arena"))]
    static DATA_CELL: StaticCell<ArenaBuf<DATA>> = StaticCell::new();
    static META_CELL: StaticCell<MaybeUninit<ArenaBuf<META>>> = StaticCell::new();
    let data = ArenaBuf::from_uninit(DATA_CELL.uninit());
    let meta = ArenaBuf::from_uninit(META_CELL.init(MaybeUninit::uninit()));
    let mut cache: KvCache<'static, Bitmap<'static>> = KvCache::new(CFG, data, meta).unwrap();
    exercise(&mut cache);
}

#[test]
fn one_static_buffer_split_in_two() {
    static BUF: StaticCell<ArenaBuf<{ DATA + 1024 }>> = StaticCell::new();
    let buf = ArenaBuf::from_uninit(BUF.uninit());
    let mut cache: KvCache<'static> = KvCache::new_split(CFG, buf).unwrap();
    assert_eq!(cache.arena_plan().num_pages, PLAN.num_pages);
    exercise(&mut cache);
}
