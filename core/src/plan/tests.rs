use super::*;
use crate::format::ElementFormat;
use crate::shape::Shape;

const SMOL: CacheConfig = CacheConfig::new(Shape::SMOLLM2_135M);

#[test]
fn smollm2_geometry() {
    let g = SMOL.geometry().unwrap();
    assert_eq!(g.k_row_bytes, 3 * 64 * 4);
    assert_eq!(g.k_stride, 16 * 768);
    assert!(g.natural);
    assert_eq!(g.page_bytes, 30 * 2 * 16 * 768);
    assert_eq!(g.table_len, 512);
}

#[test]
fn offsets_follow_the_documented_formula() {
    let plan = SMOL.plan_pages(10, 16).unwrap();
    let s = 16 * 768;
    assert_eq!(plan.page_offset(0, Kv::K, 0), Some(0));
    assert_eq!(plan.page_offset(0, Kv::K, 3), Some(3 * s));
    assert_eq!(plan.page_offset(0, Kv::V, 0), Some(10 * s));
    assert_eq!(
        plan.page_offset(2, Kv::V, 1),
        Some(2 * 10 * 2 * s + 10 * s + s)
    );
    assert_eq!(plan.page_offset(29, Kv::V, 9).unwrap() + s, plan.data_bytes);
    assert_eq!(plan.page_offset(30, Kv::K, 0), None);
    assert_eq!(plan.page_offset(0, Kv::K, 10), None);
}

#[test]
fn odd_rows_get_padded_strides() {
    let cfg = CacheConfig::new(Shape {
        layers: 2,
        kv_heads: 1,
        head_dim: 3,
    })
    .with_page_tokens(4)
    .with_formats(ElementFormat::F16, ElementFormat::F32)
    .with_align(128);
    let g = cfg.geometry().unwrap();
    assert_eq!((g.k_row_bytes, g.v_row_bytes), (6, 12));
    assert_eq!((g.k_stride, g.v_stride), (128, 128));
    assert!(!g.natural);
}

#[test]
fn pages_that_fit() {
    let g = SMOL.geometry().unwrap();
    let plan = SMOL.plan(g.page_bytes * 7 + g.page_bytes - 1, 16).unwrap();
    assert_eq!(plan.num_pages, 7);
    assert_eq!(plan.token_capacity(), 112);
    assert_eq!(
        SMOL.plan(g.page_bytes - 1, 16),
        Err(ConfigError::ArenaTooSmall)
    );
    let tiny = CacheConfig::new(Shape {
        layers: 1,
        kv_heads: 1,
        head_dim: 1,
    });
    assert_eq!(
        tiny.plan(usize::MAX, 1).unwrap().num_pages as usize,
        MAX_PAGES
    );
}

#[test]
fn reverse_sizes() {
    let s = SMOL.bytes_for(100, 3, 16).unwrap();
    assert_eq!(s.pages, 3 * 7);
    assert_eq!(s.data, 21 * 30 * 2 * 16 * 768);
    let plan = SMOL.plan_pages(21, 16).unwrap();
    assert_eq!(s.meta, plan.meta.total);
    assert_eq!(
        SMOL.bytes_for(0, 3, 16),
        Err(Error::Config(ConfigError::ZeroSize))
    );
    assert_eq!(SMOL.bytes_for(1, 9, 16), Err(Error::TooManySequences));
    assert_eq!(SMOL.bytes_for(8193, 1, 16), Err(Error::SequenceFull));
    // 8 sequences of 8192 tokens need 4096 pages: fine; more pages than ids is an overflow.
    let big = SMOL.with_sequences(u16::MAX, u32::MAX);
    assert_eq!(
        big.bytes_for(u32::MAX, u16::MAX, 16),
        Err(Error::Config(ConfigError::Overflow))
    );
}

#[test]
fn split_buffer_fits_both_arenas() {
    let g = SMOL.geometry().unwrap();
    for total in [g.page_bytes * 3, g.page_bytes * 50 + 12345] {
        let plan = SMOL.plan_split(total, 16).unwrap();
        assert!(plan.split_bytes().unwrap() <= total);
        let more = SMOL.plan_pages(plan.num_pages as usize + 1, 16).unwrap();
        assert!(
            more.split_bytes().unwrap() > total,
            "largest page count is chosen"
        );
        assert_eq!(plan.split_data_offset() % g.align, 0);
    }
    assert_eq!(
        SMOL.plan_split(g.page_bytes, 16),
        Err(ConfigError::ArenaTooSmall)
    );
    assert_eq!(SMOL.plan_split(0, 16), Err(ConfigError::ArenaTooSmall));
}

#[test]
fn bad_configs_are_errors() {
    let z = |shape| CacheConfig::new(shape).geometry();
    assert_eq!(
        z(Shape {
            layers: 0,
            kv_heads: 1,
            head_dim: 1
        }),
        Err(ConfigError::ZeroSize)
    );
    assert_eq!(
        z(Shape {
            layers: 1,
            kv_heads: 0,
            head_dim: 1
        }),
        Err(ConfigError::ZeroSize)
    );
    assert_eq!(
        z(Shape {
            layers: 1,
            kv_heads: 1,
            head_dim: 0
        }),
        Err(ConfigError::ZeroSize)
    );
    assert_eq!(
        SMOL.with_page_tokens(0).geometry(),
        Err(ConfigError::ZeroSize)
    );
    assert_eq!(
        SMOL.with_page_tokens(24).geometry(),
        Err(ConfigError::PageTokensNotPowerOfTwo)
    );
    assert_eq!(
        SMOL.with_align(32).geometry(),
        Err(ConfigError::InvalidAlignment)
    );
    assert_eq!(
        SMOL.with_align(96).geometry(),
        Err(ConfigError::InvalidAlignment)
    );
    assert_eq!(
        SMOL.with_align(0).geometry(),
        Err(ConfigError::InvalidAlignment)
    );
    assert_eq!(
        SMOL.with_sequences(0, 10).geometry(),
        Err(ConfigError::ZeroSize)
    );
    assert_eq!(
        SMOL.with_sequences(1, 0).geometry(),
        Err(ConfigError::ZeroSize)
    );
    assert_eq!(
        SMOL.with_align(1 << (usize::BITS - 1)).geometry(),
        Err(ConfigError::Overflow)
    );
    let huge = CacheConfig::new(Shape {
        layers: u16::MAX,
        kv_heads: u16::MAX,
        head_dim: u16::MAX,
    })
    .with_page_tokens(1 << 15);
    assert_eq!(huge.geometry(), Err(ConfigError::Overflow));
    assert_eq!(SMOL.plan_pages(0, 16), Err(ConfigError::ZeroSize));
    assert_eq!(
        SMOL.plan_pages(MAX_PAGES + 1, 16),
        Err(ConfigError::Overflow)
    );
}

#[test]
fn quantized_geometry() {
    // SmolLM2 with K int8 (Q8_0) and V int8 with one scale per head.
    let cfg = SMOL.with_formats(ElementFormat::Q8_0, ElementFormat::Int8 { group: 64 });
    let g = cfg.geometry().unwrap();
    assert_eq!((g.k_row_bytes, g.v_row_bytes), (192, 192));
    assert_eq!(
        (g.k_scale_row_bytes, g.v_scale_row_bytes),
        (3 * 2 * 2, 3 * 2)
    );
    assert_eq!((g.k_stride, g.k_scale_stride), (16 * 192, 192));
    assert_eq!(
        g.v_scale_stride, 128,
        "96 bytes of scales padded to the alignment"
    );
    assert!(!g.natural);
    assert_eq!(g.page_bytes, 30 * (3072 + 192 + 3072 + 128));
    let plan = cfg.plan_pages(4, 16).unwrap();
    assert_eq!(plan.scale_offset(0, Kv::K, 1), Some(4 * 3072 + 192));
    assert_eq!(
        plan.scale_offset(1, Kv::V, 0),
        Some(4 * g.layer_stride + 4 * (3072 + 192 + 3072))
    );
    assert_eq!(plan.scale_offset(0, Kv::K, 4), None);
    // FP8 tiles: SGLang's d = 576, dv = 512, tile = 128, bf16 → 656-byte rows, no scale pool.
    let nsa = CacheConfig::new(Shape {
        layers: 1,
        kv_heads: 1,
        head_dim: 576,
    })
    .with_formats(
        ElementFormat::Fp8Tile {
            dv: 512,
            tile: 128,
            bf16: true,
        },
        ElementFormat::F16,
    );
    let g = nsa.geometry().unwrap();
    assert_eq!((g.k_row_bytes, g.k_scale_stride), (656, 0));
}

#[test]
fn quantized_formats_must_fit_the_shape() {
    let bad = |f| SMOL.with_formats(ElementFormat::F32, f).geometry();
    assert_eq!(
        bad(ElementFormat::Int8 { group: 0 }),
        Err(ConfigError::InvalidFormat)
    );
    assert_eq!(
        bad(ElementFormat::Int8 { group: 48 }),
        Err(ConfigError::InvalidFormat)
    );
    assert_eq!(
        bad(ElementFormat::Int8 { group: 128 }),
        Err(ConfigError::InvalidFormat)
    );
    let fp8 = |dv, tile| ElementFormat::Fp8Tile {
        dv,
        tile,
        bf16: false,
    };
    assert_eq!(bad(fp8(64, 0)), Err(ConfigError::InvalidFormat));
    assert_eq!(bad(fp8(0, 16)), Err(ConfigError::InvalidFormat));
    assert_eq!(bad(fp8(48, 32)), Err(ConfigError::InvalidFormat));
    assert_eq!(
        bad(fp8(128, 64)),
        Err(ConfigError::InvalidFormat),
        "dv > head_dim"
    );
    assert!(bad(fp8(64, 64)).is_ok());
    assert_eq!(
        bad(ElementFormat::Int8 { group: 1 }),
        Err(ConfigError::InvalidFormat),
        "a scale per value"
    );
    assert!(bad(ElementFormat::Int8 { group: 2 }).is_ok());
}

#[test]
fn usable_in_const_context() {
    const PLAN: Plan = match SMOL.plan_pages(4, 16) {
        Ok(p) => p,
        Err(_) => panic!("bad plan"),
    };
    const META: usize = PLAN.meta.total;
    const { assert!(META > 0) };
    assert_eq!(PLAN.num_pages, 4);
}
