//! Attention over pages against a dense f64 reference on the very values the pages hold, for
//! every format; chunked equals unchunked bit for bit; windows with sinks; bad input.

use crate::common::{Arenas, invariants};
use edgekv::attention::{AttentionParams, BLOCK_ROWS};
use edgekv::{
    CacheConfig, ConfigError, ElementFormat, Error, FreeList, Kv, KvCache, SeqId, SeqMode, Shape,
};

const SHAPE: Shape = Shape {
    layers: 2,
    kv_heads: 2,
    head_dim: 32,
};
const Q_HEADS: u16 = 6;
const KV_ROW: usize = 64;
const Q_ROW: usize = 6 * 32;

fn cfg(k: ElementFormat, v: ElementFormat) -> CacheConfig {
    CacheConfig::new(SHAPE)
        .with_page_tokens(8)
        .with_formats(k, v)
        .with_sequences(2, 512)
}

/// Deterministic values in [-1, 1) with a few outliers.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
            if i % 29 == 0 { v * 6.0 } else { v }
        })
        .collect()
}

/// A sequence of `n` tokens with K/V rows from `values`.
fn filled(c: &mut KvCache<'_>, n: u32) -> SeqId {
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    c.reserve(s, n).unwrap();
    for layer in 0..SHAPE.layers {
        let k = values(1 + layer as u64, n as usize * KV_ROW);
        let v = values(100 + layer as u64, n as usize * KV_ROW);
        c.write_kv(s, layer, 0, &k, &v).unwrap();
    }
    s
}

/// Dense f64 attention over the rows the cache holds (read back, so quantization is excluded).
fn reference(
    c: &KvCache<'_>,
    s: SeqId,
    layer: u16,
    start: u32,
    q: &[f32],
    window: Option<(u32, u32)>,
) -> Vec<f64> {
    let len = c.seq_len(s).unwrap() as usize;
    let mut k = vec![0f32; len * KV_ROW];
    let mut v = vec![0f32; len * KV_ROW];
    c.read(s, layer, Kv::K, 0, &mut k).unwrap();
    c.read(s, layer, Kv::V, 0, &mut v).unwrap();
    match c.config().k_format {
        ElementFormat::Int8 { group } if group >= 2 => {
            dense(&k, &v, start, &query_as_scored(q, group as usize), window)
        }
        _ => dense(&k, &v, start, q, window),
    }
}

/// What int8 keys score against: each query group of `g` values rounded to 16-bit codes of its
/// largest magnitude (`round(x · 32767 / amax) · amax / 32767`).
fn query_as_scored(q: &[f32], g: usize) -> Vec<f32> {
    q.chunks(g)
        .flat_map(|x| {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            x.iter().map(move |v| {
                if amax == 0.0 {
                    0.0
                } else {
                    (v * (32767.0 / amax)).round() * (amax / 32767.0)
                }
            })
        })
        .collect()
}

/// Dense f64 attention over `[tokens][kv_heads][head_dim]` K and V.
fn dense(k: &[f32], v: &[f32], start: u32, q: &[f32], window: Option<(u32, u32)>) -> Vec<f64> {
    let hd = SHAPE.head_dim as usize;
    let group = (Q_HEADS / SHAPE.kv_heads) as usize;
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0f64; q.len()];
    for (qi, qrow) in q.chunks_exact(Q_ROW).enumerate() {
        let t = start as usize + qi;
        for h in 0..Q_HEADS as usize {
            let kh = h / group;
            let qh = &qrow[h * hd..(h + 1) * hd];
            let keys: Vec<usize> = (0..=t)
                .filter(|&j| {
                    window.is_none_or(|(sinks, w)| j < sinks as usize || t - j < w as usize)
                })
                .collect();
            let scores: Vec<f64> = keys
                .iter()
                .map(|&j| {
                    let kr = &k[j * KV_ROW + kh * hd..][..hd];
                    qh.iter()
                        .zip(kr)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let total: f64 = w.iter().sum();
            let o = &mut out[qi * Q_ROW + h * hd..][..hd];
            for (&j, wj) in keys.iter().zip(&w) {
                let vr = &v[j * KV_ROW + kh * hd..][..hd];
                for (oi, vi) in o.iter_mut().zip(vr) {
                    *oi += wj / total * *vi as f64;
                }
            }
        }
    }
    out
}

fn max_rel_err(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().map(|x| x.abs()).fold(0.0, f64::max).max(1e-30);
    got.iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - w).abs() / scale)
        .fold(0.0, f64::max)
}

fn attend(
    c: &KvCache<'_>,
    s: SeqId,
    layer: u16,
    start: u32,
    q: &[f32],
    p: &AttentionParams,
) -> Vec<f32> {
    let mut out = vec![0f32; q.len()];
    let mut scratch = vec![0f32; c.config().scratch_len(Q_HEADS, 1)];
    c.attention(s, layer, start, q, &mut out, p, &mut scratch)
        .unwrap();
    out
}

const FORMATS: [ElementFormat; 8] = [
    ElementFormat::F32,
    ElementFormat::F16,
    ElementFormat::Bf16,
    ElementFormat::Q8_0,
    ElementFormat::Int8 { group: 32 },
    ElementFormat::Fp8Tile {
        dv: 16,
        tile: 16,
        bf16: false,
    },
    ElementFormat::Q4_0,
    ElementFormat::Q4_1,
];

#[test]
fn every_format_matches_the_dense_reference_on_its_stored_values() {
    let n = if cfg!(miri) { 12 } else { 75 };
    for fmt in FORMATS {
        let cfg = cfg(fmt, fmt);
        let mut a = Arenas::new::<FreeList>(&cfg, 24);
        let mut c: KvCache = a.cache(cfg);
        let s = filled(&mut c, n);
        let p = AttentionParams::new(SHAPE, Q_HEADS);
        let starts: &[u32] = if cfg!(miri) {
            &[n - 2]
        } else {
            &[0, n / 2, n - 1]
        };
        for &start in starts {
            let q = values(7 + start as u64, (n - start) as usize * Q_ROW);
            let got = attend(&c, s, 1, start, &q, &p);
            let want = reference(&c, s, 1, start, &q, None);
            let err = max_rel_err(&got, &want);
            assert!(err < 1e-5, "{fmt:?} from {start}: {err:e}");
        }
        invariants(&c);
    }
}

/// Rotated halves: rows read back rotated back (f32 pages: the written values to the
/// transforms' rounding), and attention over the rotated pages (queries rotated for K, output
/// rotated back for V) matches the dense reference over the read-back rows. Rotation spreads
/// the outliers of `values`, so rotated Q4_0 rows read back closer to what was written.
#[test]
fn rotated_rows_attend_as_their_read_back_values() {
    use edgekv::Rotation::{Hadamard, None as Plain, SignedHadamard};
    let n = if cfg!(miri) { 10 } else { 40 };
    let err_of = |c: &KvCache<'_>, s, kv, want: &[f32]| {
        let mut back = vec![0f32; want.len()];
        c.read(s, 1, kv, 0, &mut back).unwrap();
        let amax = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        back.iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max)
            / amax
    };
    let v_written = values(101, n as usize * KV_ROW);
    let mut q4_err = [0f32; 2];
    let cases = [
        (
            ElementFormat::F32,
            Hadamard,
            ElementFormat::F32,
            SignedHadamard,
        ),
        (
            ElementFormat::Q4_0,
            SignedHadamard,
            ElementFormat::Q4_0,
            SignedHadamard,
        ),
        (ElementFormat::Q8_0, Plain, ElementFormat::Q4_0, Hadamard),
        (ElementFormat::Q4_0, Plain, ElementFormat::Q4_0, Plain),
    ];
    for (i, (kf, kr, vf, vr)) in cases.into_iter().enumerate() {
        let cfg = cfg(kf, vf).with_rotations(kr, vr);
        let mut a = Arenas::new::<FreeList>(&cfg, 24);
        let mut c: KvCache = a.cache(cfg);
        let s = filled(&mut c, n);
        let err = err_of(&c, s, Kv::V, &v_written);
        match i {
            0 => assert!(err < 1e-6, "f32 rotated round trip: {err:e}"),
            1 => q4_err[0] = err,
            3 => q4_err[1] = err,
            _ => {}
        }
        let p = AttentionParams::new(SHAPE, Q_HEADS);
        let q = values(7, (n - 3) as usize * Q_ROW);
        let got = attend(&c, s, 1, 3, &q, &p);
        let want = reference(&c, s, 1, 3, &q, None);
        let e = max_rel_err(&got, &want);
        assert!(e < 1e-5, "{kf:?} {kr:?} / {vf:?} {vr:?}: {e:e}");
    }
    assert!(
        q4_err[0] < q4_err[1],
        "rotated Q4_0 {} vs plain {}",
        q4_err[0],
        q4_err[1]
    );
}

/// Split over threads (scoped, or a `Workers` team kept between calls: a decode row's KV heads
/// too), attention gives the one-call bits, at every thread count, for prefill and decode rows,
/// with and without a window, with rotated and quantized pages of every kind.
#[cfg(feature = "std")]
#[test]
fn threads_give_the_one_call_bits() {
    use edgekv::Rotation;
    let n = if cfg!(miri) { 9 } else { 40 };
    let configs = [
        cfg(ElementFormat::Q8_0, ElementFormat::Q8_0),
        cfg(ElementFormat::F16, ElementFormat::F32),
        cfg(ElementFormat::Q4_0, ElementFormat::Q4_1)
            .with_rotations(Rotation::SignedHadamard, Rotation::Hadamard),
        cfg(
            ElementFormat::Int8 { group: 16 },
            ElementFormat::Fp8Tile {
                dv: 16,
                tile: 8,
                bf16: true,
            },
        ),
    ];
    let thread_counts: &[usize] = if cfg!(miri) {
        &[2]
    } else {
        &[0, 1, 2, 3, 4, 7, 64]
    };
    // Teams of 0–4 threads, kept across every call below; the even ones sleep between calls.
    let mut teams: Vec<edgekv::Workers> = (0..5)
        .map(|t| {
            let spin = std::time::Duration::from_micros(if t % 2 == 0 { 0 } else { 500 });
            edgekv::Workers::with_spin(t, spin).unwrap()
        })
        .collect();
    for cfg in configs {
        let mut a = Arenas::new::<FreeList>(&cfg, 24);
        let mut c: KvCache = a.cache(cfg);
        let s = filled(&mut c, n);
        for p in [
            AttentionParams::new(SHAPE, Q_HEADS),
            AttentionParams::new(SHAPE, Q_HEADS).with_window(2, 5),
        ] {
            for start in [0, n - 1] {
                let q = values(11 + start as u64, (n - start) as usize * Q_ROW);
                let one = attend(&c, s, 1, start, &q, &p);
                for &t in thread_counts {
                    let mut out = vec![f32::NAN; q.len()];
                    c.attention_threads(s, 1, start, &q, &mut out, &p, t)
                        .unwrap();
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&out),
                        bits(&one),
                        "{cfg:?} {p:?} start {start} threads {t}"
                    );
                    let mut out = vec![f32::NAN; q.len()];
                    c.attention_workers(s, 1, start, &q, &mut out, &p, &mut teams[t.min(4)])
                        .unwrap();
                    assert_eq!(
                        bits(&out),
                        bits(&one),
                        "{cfg:?} {p:?} start {start} team {t}"
                    );
                }
            }
        }
        // Bad input: the same errors as one call, and `out` untouched.
        let mut out = vec![7f32; Q_ROW];
        let p = AttentionParams::new(SHAPE, Q_HEADS);
        assert_eq!(
            c.attention_threads(s, 1, n, &[0.5; Q_ROW], &mut out, &p, 2),
            Err(edgekv::Error::PositionOutOfRange)
        );
        assert_eq!(
            c.attention_threads(s, 9, 0, &[0.5; Q_ROW], &mut out, &p, 2),
            Err(edgekv::Error::LayerOutOfRange)
        );
        assert_eq!(
            c.attention_workers(s, 9, 0, &[0.5; Q_ROW], &mut out, &p, &mut teams[2]),
            Err(edgekv::Error::LayerOutOfRange)
        );
        assert!(out.iter().all(|&x| x == 7.0));
    }
}

/// Rows over more than 2,048 keys run in key segments merged in order: they match the dense
/// reference, chunked prefill still equals one pass, and threads (by segments for one decode
/// row, by rows otherwise; scoped or a `Workers` team) give the one-call bits.
#[cfg(feature = "std")]
#[cfg_attr(miri, ignore = "thousands of keys: too slow under Miri")]
#[test]
fn long_rows_run_in_segments_with_the_same_bits_on_threads() {
    let n = 4300u32; // 68 pages of 64 tokens: three segments of 2,048 keys
    for (k, v) in [
        (ElementFormat::Q8_0, ElementFormat::Q8_0),
        (ElementFormat::F32, ElementFormat::F16),
    ] {
        let cfg = CacheConfig::new(SHAPE)
            .with_page_tokens(64)
            .with_formats(k, v)
            .with_sequences(1, n);
        let mut a = Arenas::new::<FreeList>(&cfg, 68);
        let mut c: KvCache = a.cache(cfg);
        let s = filled(&mut c, n);
        for p in [
            AttentionParams::new(SHAPE, Q_HEADS),
            AttentionParams::new(SHAPE, Q_HEADS).with_window(4, 2500),
        ] {
            let window = p.window.map(|w| (w.sinks, w.window));
            let q = values(5, 3 * Q_ROW);
            let start = n - 3;
            let got = attend(&c, s, 1, start, &q, &p);
            let err = max_rel_err(&got, &reference(&c, s, 1, start, &q, window));
            assert!(err < 1e-5, "{k:?}/{v:?} {p:?}: {err:e}");
            let mut parts = Vec::new();
            for (i, qr) in q.chunks(Q_ROW).enumerate() {
                parts.extend(attend(&c, s, 1, start + i as u32, qr, &p));
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&parts), bits(&got), "rows one by one");
            // A block of rows across the second segment's first page (4,093–4,100: two and
            // three segments).
            let q8 = values(6, 8 * Q_ROW);
            let mut parts = Vec::new();
            for (i, qr) in q8.chunks(Q_ROW).enumerate() {
                parts.extend(attend(&c, s, 1, 4093 + i as u32, qr, &p));
            }
            let mut out = vec![f32::NAN; q8.len()];
            let mut scratch = vec![0f32; c.config().scratch_len(Q_HEADS, 8)];
            c.attention(s, 1, 4093, &q8, &mut out, &p, &mut scratch)
                .unwrap();
            assert_eq!(bits(&out), bits(&parts), "{p:?} a block of eight rows");
            for t in [2, 3, 4, 9] {
                let mut out = vec![f32::NAN; q.len()];
                c.attention_threads(s, 1, start, &q, &mut out, &p, t)
                    .unwrap();
                assert_eq!(bits(&out), bits(&got), "{p:?} threads {t}, three rows");
                let last = &q[2 * Q_ROW..];
                let mut one = vec![f32::NAN; Q_ROW];
                c.attention_threads(s, 1, n - 1, last, &mut one, &p, t)
                    .unwrap();
                assert_eq!(
                    bits(&one),
                    bits(&got[2 * Q_ROW..]),
                    "{p:?} threads {t}, decode"
                );
                let mut team = edgekv::Workers::new(t).unwrap();
                let mut one = vec![f32::NAN; Q_ROW];
                c.attention_workers(s, 1, n - 1, last, &mut one, &p, &mut team)
                    .unwrap();
                assert_eq!(
                    bits(&one),
                    bits(&got[2 * Q_ROW..]),
                    "{p:?} team {t}, decode"
                );
                c.attention_workers(s, 1, start, &q, &mut out, &p, &mut team)
                    .unwrap();
                assert_eq!(bits(&out), bits(&got), "{p:?} team {t}, three rows");
            }
        }
    }
}

/// `attention` with scratch for blocks of `rows` query rows.
fn attend_blocks(
    c: &KvCache<'_>,
    s: SeqId,
    start: u32,
    q: &[f32],
    p: &AttentionParams,
    rows: usize,
) -> Vec<f32> {
    let mut out = vec![f32::NAN; q.len()];
    let mut scratch = vec![f32::NAN; c.config().scratch_len(p.q_heads, rows)];
    c.attention(s, 1, start, q, &mut out, p, &mut scratch)
        .unwrap();
    out
}

/// Blocks of query rows computed together (the scratch of `CacheConfig::scratch_len`) give the bits of
/// one row at a time: every format, rotated pages, windows, groups of 1–3 query heads per KV
/// head, blocks of 2–8 rows starting anywhere in a page, last blocks of one row.
#[test]
fn blocks_of_rows_give_the_row_by_row_bits() {
    use edgekv::Rotation;
    let n = if cfg!(miri) { 14 } else { 61 };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut configs: Vec<CacheConfig> = FORMATS.iter().map(|&f| cfg(f, f)).collect();
    configs.push(cfg(ElementFormat::Q8_0, ElementFormat::F16));
    configs.push(
        cfg(ElementFormat::Q4_0, ElementFormat::Q8_0)
            .with_rotations(Rotation::SignedHadamard, Rotation::Hadamard),
    );
    configs.push(
        cfg(ElementFormat::Q8_0, ElementFormat::Q8_0)
            .with_rotations(Rotation::SignedHadamard, Rotation::None),
    );
    if cfg!(miri) {
        configs.truncate(2);
    }
    // `small-code` builds compute one row at a time: blocks then are rows, trivially equal.
    assert_eq!(BLOCK_ROWS, if cfg!(feature = "small-code") { 1 } else { 8 });
    for cfg in configs {
        let mut a = Arenas::new::<FreeList>(&cfg, 24);
        let mut c: KvCache = a.cache(cfg);
        let s = filled(&mut c, n);
        for q_heads in [2, 4, 6] {
            let row = q_heads as usize * SHAPE.head_dim as usize;
            for p in [
                AttentionParams::new(SHAPE, q_heads),
                AttentionParams::new(SHAPE, q_heads).with_window(2, 5),
                AttentionParams::new(SHAPE, q_heads).with_window(0, 19),
            ] {
                let starts: &[u32] = if cfg!(miri) { &[0, 5] } else { &[0, 3, 21, 40] };
                for &start in starts {
                    let q = values(31 + start as u64, (n - start) as usize * row);
                    let mut one = vec![0f32; q.len()];
                    let mut scratch = vec![0f32; c.config().scratch_len(q_heads, 1)];
                    for (i, (qr, or)) in q.chunks(row).zip(one.chunks_mut(row)).enumerate() {
                        c.attention(s, 1, start + i as u32, qr, or, &p, &mut scratch)
                            .unwrap();
                    }
                    let blocks: &[usize] = if cfg!(miri) { &[3] } else { &[2, 3, 5, 8, 9] };
                    for &b in blocks {
                        let got = attend_blocks(&c, s, start, &q, &p, b);
                        assert_eq!(
                            bits(&got),
                            bits(&one),
                            "{cfg:?} {p:?} start {start} rows {b}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn chunked_prefill_is_bit_identical_to_one_pass() {
    let n = if cfg!(miri) { 16 } else { 70 };
    for fmt in [ElementFormat::F32, ElementFormat::Q8_0] {
        let cfg = cfg(fmt, ElementFormat::F16);
        let mut a = Arenas::new::<FreeList>(&cfg, 24);
        let mut c: KvCache = a.cache(cfg);
        let s = filled(&mut c, n);
        let p = AttentionParams::new(SHAPE, Q_HEADS);
        let q = values(9, n as usize * Q_ROW);
        let whole = attend(&c, s, 0, 0, &q, &p);
        let chunks: &[usize] = if cfg!(miri) { &[1, 5] } else { &[1, 5, 8, 16] };
        for &chunk in chunks {
            let mut parts = Vec::new();
            for (i, qc) in q.chunks(chunk * Q_ROW).enumerate() {
                parts.extend(attend(&c, s, 0, (i * chunk) as u32, qc, &p));
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&parts), bits(&whole), "{fmt:?} chunk {chunk}");
        }
    }
}

#[test]
fn windows_with_sinks_match_the_masked_reference() {
    let n = if cfg!(miri) { 20 } else { 90 };
    let cfg = cfg(ElementFormat::F32, ElementFormat::F32);
    let mut a = Arenas::new::<FreeList>(&cfg, 24);
    let mut c: KvCache = a.cache(cfg);
    let s = filled(&mut c, n);
    let windows: &[(u32, u32)] = if cfg!(miri) {
        &[(4, 16), (3, 5)]
    } else {
        &[(0, 1), (4, 16), (3, 5), (0, 1000), (100, 2)]
    };
    let queries = if cfg!(miri) { 3 } else { 10 };
    for &(sinks, window) in windows {
        let p = AttentionParams::new(SHAPE, Q_HEADS).with_window(sinks, window);
        let q = values(11, queries * Q_ROW);
        let start = n - queries as u32;
        let got = attend(&c, s, 0, start, &q, &p);
        let want = reference(&c, s, 0, start, &q, Some((sinks, window)));
        assert!(
            max_rel_err(&got, &want) < 1e-5,
            "sinks {sinks} window {window}"
        );
    }
}

#[test]
fn bad_input_is_an_error() {
    let cfg = cfg(ElementFormat::F32, ElementFormat::F32);
    let mut a = Arenas::new::<FreeList>(&cfg, 8);
    let mut c: KvCache = a.cache(cfg);
    let s = filled(&mut c, 10);
    let p = AttentionParams::new(SHAPE, Q_HEADS);
    let q = vec![0.5f32; Q_ROW];
    let mut out = vec![0f32; Q_ROW];
    let mut scratch = vec![0f32; c.config().scratch_len(Q_HEADS, 1)];
    let run =
        |seq, layer, start, q: &[f32], out: &mut [f32], p: &AttentionParams, scr: &mut [f32]| {
            c.attention(seq, layer, start, q, out, p, scr)
        };
    let stale = SeqId::from_raw(0x0009_0001);
    assert_eq!(
        run(stale, 0, 0, &q, &mut out, &p, &mut scratch),
        Err(Error::UnknownSequence)
    );
    assert_eq!(
        run(s, 2, 0, &q, &mut out, &p, &mut scratch),
        Err(Error::LayerOutOfRange)
    );
    assert_eq!(
        run(s, 0, 10, &q, &mut out, &p, &mut scratch),
        Err(Error::PositionOutOfRange)
    );
    assert_eq!(
        run(s, 0, u32::MAX, &q, &mut out, &p, &mut scratch),
        Err(Error::PositionOutOfRange)
    );
    assert_eq!(
        run(s, 0, 0, &q[..5], &mut out[..5], &p, &mut scratch),
        Err(Error::LengthMismatch)
    );
    assert_eq!(
        run(s, 0, 0, &[], &mut [], &p, &mut scratch),
        Err(Error::LengthMismatch)
    );
    assert_eq!(
        run(s, 0, 0, &q, &mut out[..1], &p, &mut scratch),
        Err(Error::LengthMismatch)
    );
    assert_eq!(
        run(s, 0, 0, &q, &mut out, &p, &mut scratch[..3]),
        Err(Error::LengthMismatch)
    );
    let odd = AttentionParams { q_heads: 5, ..p };
    assert_eq!(
        run(s, 0, 0, &q[..160], &mut out[..160], &odd, &mut scratch),
        Err(Error::HeadMismatch)
    );
    let zero = AttentionParams { q_heads: 0, ..p };
    assert_eq!(
        run(s, 0, 0, &q, &mut out, &zero, &mut scratch),
        Err(Error::HeadMismatch)
    );
    let w0 = p.with_window(0, 0);
    assert_eq!(
        run(s, 0, 0, &q, &mut out, &w0, &mut scratch),
        Err(Error::Config(ConfigError::ZeroSize))
    );
    assert!(out.iter().all(|&x| x == 0.0), "no output on error");
}

#[test]
fn sliding_window_releases_pages_and_keeps_results() {
    let n = if cfg!(miri) { 32u32 } else { 120 };
    /// The decode step after which a fork shares the kept pages.
    const FORK_AT: u32 = if cfg!(miri) { 12 } else { 30 };
    let (sinks, window) = (4u32, 16u32);
    let cfg = cfg(ElementFormat::F32, ElementFormat::F32).with_sequences(3, 512);
    let mut a = Arenas::new::<FreeList>(&cfg, 40);
    let mut c: KvCache = a.cache(cfg);
    let k = values(1, n as usize * KV_ROW);
    let v = values(100, n as usize * KV_ROW);
    let s = c.create_sequence(SeqMode::Paged).unwrap();
    let p = AttentionParams::new(SHAPE, Q_HEADS).with_window(sinks, window);
    let w = p.window.unwrap();
    let mut released = 0;
    let mut shared = None;
    for t in 0..n {
        c.reserve(s, 1).unwrap();
        let r = t as usize * KV_ROW..(t as usize + 1) * KV_ROW;
        for layer in 0..SHAPE.layers {
            c.write_kv(s, layer, t, &k[r.clone()], &v[r.clone()])
                .unwrap();
        }
        let q = values(1000 + t as u64, Q_ROW);
        let got = attend(&c, s, 0, t, &q, &p);
        let want = dense(&k[..r.end], &v[..r.end], t, &q, Some((sinks, window)));
        assert!(max_rel_err(&got, &want) < 1e-5, "decode step {t}");
        released += c.slide(s, &w, t + 1).unwrap();
        // Sinks (1 page) + window (16 tokens over at most 3 pages).
        assert!(
            c.sequence(s).unwrap().pages as usize - released as usize <= 4,
            "step {t}"
        );
        if t == FORK_AT {
            // A fork shares the kept pages; the parent's later releases keep the child's.
            shared = Some(c.fork(s).unwrap());
        }
        invariants(&c);
    }
    assert_eq!(
        released as u32,
        (n + 1 - window) / 8 - 1,
        "every page between sinks and window"
    );
    let child = shared.unwrap();
    let table = c.page_table(child).unwrap().to_vec();
    for (i, &page) in table.iter().enumerate() {
        if page != edgekv::NO_PAGE {
            assert!(c.page_state(page).is_some(), "child page {i} still held");
        }
    }
    // The child decodes on under the same window (queries at ≥ the `from` of its last slide).
    let next = FORK_AT + 1;
    assert_eq!(c.reserve(child, 1), Ok(next));
    let r = next as usize * KV_ROW..(next as usize + 1) * KV_ROW;
    c.write_kv(child, 0, next, &k[r.clone()], &v[r.clone()])
        .unwrap();
    let q = values(5, Q_ROW);
    let got = attend(&c, child, 0, next, &q, &p);
    let want = dense(&k[..r.end], &v[..r.end], next, &q, Some((sinks, window)));
    assert!(max_rel_err(&got, &want) < 1e-5);

    // Released positions are gone, everywhere.
    // Page 1 (positions 8..16) lies between the sinks and every window: released.
    const RELEASED: u32 = 12;
    let mut row = vec![0f32; KV_ROW];
    let mut scratch = vec![0f32; c.config().scratch_len(Q_HEADS, 1)];
    let full = AttentionParams::new(SHAPE, Q_HEADS);
    assert_eq!(
        c.read(s, 0, Kv::K, RELEASED, &mut row),
        Err(Error::PositionOutOfRange)
    );
    assert_eq!(
        c.write(s, 0, Kv::K, RELEASED, &row),
        Err(Error::PositionOutOfRange)
    );
    // A failed call writes no output: neither `out` nor `scratch` (one query and a chunk whose
    // queries need the released page).
    for queries in [1usize, 3] {
        let q = values(6, queries * Q_ROW);
        let mut out = vec![7.5f32; queries * Q_ROW];
        scratch.fill(-3.25);
        assert_eq!(
            c.attention(s, 0, n - queries as u32, &q, &mut out, &full, &mut scratch),
            Err(Error::PositionOutOfRange)
        );
        assert!(out.iter().all(|&x| x == 7.5), "out untouched on error");
        assert!(scratch.iter().all(|&x| x == -3.25), "scratch untouched");
    }
    assert_eq!(c.truncate(s, RELEASED + 1), Err(Error::PositionOutOfRange));
    assert_eq!(c.slide(s, &w, n + 1), Err(Error::PositionOutOfRange));
    let zero = edgekv::attention::Window {
        sinks: 0,
        window: 0,
    };
    assert_eq!(
        c.slide(s, &zero, n),
        Err(Error::Config(ConfigError::ZeroSize))
    );
    // Sinks still read; forks of a slid sequence carry its holes.
    c.read(s, 0, Kv::K, 3, &mut row).unwrap();
    assert_eq!(row, k[3 * KV_ROW..4 * KV_ROW]);
    let f = c.fork(s).unwrap();
    assert_eq!(
        c.read(f, 0, Kv::K, RELEASED, &mut row),
        Err(Error::PositionOutOfRange)
    );
    invariants(&c);
    for q in [s, f, child] {
        c.free_sequence(q).unwrap();
    }
    assert_eq!(c.stats().pages_used, 0);
    invariants(&c);
}

#[test]
fn sliding_a_contiguous_sequence_is_refused() {
    let cfg = cfg(ElementFormat::F32, ElementFormat::F32);
    let mut a = Arenas::new::<edgekv::Bitmap>(&cfg, 8);
    let mut c: KvCache<'_, edgekv::Bitmap<'_>> = a.cache(cfg);
    let s = c.create_sequence(SeqMode::Contiguous).unwrap();
    c.reserve(s, 20).unwrap();
    let w = edgekv::attention::Window {
        sinks: 0,
        window: 4,
    };
    assert_eq!(c.slide(s, &w, 20), Err(Error::NotPaged));
}
