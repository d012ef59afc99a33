//! The parity cases of `edgekv-parity` against a dense f64 reference built from the cases' own
//! events (the original f32 rows and queries, before any page format rounds them), plus the
//! digest equalities the cases are built for and a stable digest listing.
//!
//! # Error bounds of the quantized formats (derived, checked per output element)
//!
//! For one query row and head let `s_j = c·(q·k_j)` (c = 1/√64) be the exact scores over the
//! visible keys, `p = softmax(s)`, `o = Σ p_j v_j`. The pages hold `k̂ = k + δ`, `v̂ = v + η`
//! with per-element bounds `|δ_ji| ≤ Δk_ji`, `|η_ji| ≤ Δv_ji` from the format's rounding:
//!
//! - f16: round to nearest, 11 significant bits: `Δ = max(|x|·2⁻¹¹, 2⁻²⁵)` (the second term is
//!   half the subnormal spacing).
//! - bf16: 8 significant bits: `Δ = max(|x|·2⁻⁸, 2⁻¹³³)`.
//! - int8 with groups of g (Q8_0 math): `d = amax/127`, code `round(x·(1/d))`, stored scale
//!   `f16(d)`, value `code·f16(d)`. `|x − code·d| ≤ d/2` (plus `127·d·2⁻²²` for the f32 rounding
//!   of `1/d` and `x·(1/d)`), `|code·d − code·f16(d)| ≤ 127·max(d·2⁻¹¹, 2⁻²⁵)`, and the f32
//!   product adds `127·d·2⁻²³`: `Δ = d·(1/2 + 127·2⁻²² + 127·2⁻²³) + 127·max(d·2⁻¹¹, 2⁻²⁵)`.
//! - FP8 E4M3 tile (f32 scales, f32 tail): `s = amax/448` per tile, code `e4m3(x/s)` with 3
//!   mantissa bits (relative rounding error ≤ 2⁻⁴ in the normal range, absolute ≤ 2⁻¹⁰ in the
//!   subnormal one, spacing 2⁻⁹), value `e4m3·s`: `Δ = max(|x|·2⁻⁴, s·2⁻¹⁰)·(1 + 2⁻²⁰)`
//!   (the factor covers the f32 rounding of `x/s` and of the product); the tail is exact, `Δ = 0`.
//!
//! Propagation: the score errors are `ε_j = c·(q·δ_j)`, `|ε_j| ≤ E_j := c·Σ_i |q_i|·Δk_ji`.
//! The perturbed weights are `p̂_j = p_j·e^{ε_j} / Z` with `Z = Σ_k p_k e^{ε_k}` in
//! `[Z_lo, Z_hi] = [Σ_k p_k e^{−E_k}, Σ_k p_k e^{E_k}]`, so
//! `e^{−E_j}/Z_hi ≤ p̂_j/p_j ≤ e^{E_j}/Z_lo =: u_j` and `|p̂_j − p_j| ≤ p_j·g_j` with
//! `g_j = max(u_j − 1, 1 − e^{−E_j}/Z_hi)`. (With one `E = max_j E_j` this is the familiar
//! `Σ_j |p̂_j − p_j| ≤ e^{2E} − 1`; per key it is much tighter, since the weight sits on few keys.)
//! Since `Σ_j (p̂_j − p_j) = 0`, for channel i and any constant `c`:
//!
//! ```text
//! ô_i − o_i = Σ_j (p̂_j − p_j)(v_ji − c) + Σ_j p̂_j η_ji
//! |ô_i − o_i| ≤ min over c ∈ {midpoint of v_·i, o_i} of Σ_j p_j g_j |v_ji − c|
//!             + min(max_j Δv_ji, Σ_j p_j u_j Δv_ji)                          =: B_i
//! ```
//!
//! Each output element is checked against `B_i + 1e-5·max|o|` (the second term is the f32
//! arithmetic of the kernel, the tolerance of the f32 pages). The bound is worst case (every
//! rounding error aligned with the query); it is nearly reached only where the V term dominates
//! (a query whose weight sits on one key sees that key's V rounding error in full). The test
//! prints, relative to the case's max |o|, the largest measured error and the largest bound, and
//! the largest measured/bound ratio over all elements.

use std::collections::BTreeMap;
use std::mem::MaybeUninit;

use edgekv::{ElementFormat, Rotation};
use edgekv_parity::{
    Arenas, CASES, Case, DATA_BYTES, Digest, Event, KV_ROW, META_BYTES, OutputCrc, Q_HEADS, Q_ROW,
    SHAPE, WORK_F32, run,
};

const HD: usize = SHAPE.head_dim as usize;
const LAYERS: usize = SHAPE.layers as usize;
const GROUP: usize = (Q_HEADS / SHAPE.kv_heads) as usize;

/// Per-element rounding bound of `format` for one head row `x` (see the module docs).
fn delta(format: ElementFormat, x: &[f32]) -> Vec<f64> {
    let p = |e: i32| 2f64.powi(e);
    match format {
        ElementFormat::F32 => vec![0.0; x.len()],
        ElementFormat::F16 => x
            .iter()
            .map(|&v| (v.abs() as f64 * p(-11)).max(p(-25)))
            .collect(),
        ElementFormat::Bf16 => x
            .iter()
            .map(|&v| (v.abs() as f64 * p(-8)).max(p(-133)))
            .collect(),
        ElementFormat::Int8 { group } => x
            .chunks(group as usize)
            .flat_map(|g| {
                let amax = g.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
                let d = amax / 127.0;
                let b =
                    d * (0.5 + 127.0 * p(-22) + 127.0 * p(-23)) + 127.0 * (d * p(-11)).max(p(-25));
                std::iter::repeat_n(b, g.len())
            })
            .collect(),
        ElementFormat::Fp8Tile { dv, tile, bf16 } => {
            assert!(!bf16, "bounds derived for f32 tiles only");
            let (dv, tile) = (dv as usize, tile as usize);
            let mut out = vec![0.0; x.len()];
            for (t, o) in x[..dv].chunks(tile).zip(out[..dv].chunks_mut(tile)) {
                let s = t.iter().fold(0f64, |m, v| m.max(v.abs() as f64)) / 448.0;
                for (v, b) in t.iter().zip(o) {
                    *b = (v.abs() as f64 * p(-4)).max(s * p(-10)) * (1.0 + p(-20));
                }
            }
            out
        }
        // Q4_0: |d| = amax / 8; a code is off by at most d / 2, or a whole d where the value of
        // the other sign than the largest clamps at code 15; the f16 scale adds ≤ 8 · its own
        // rounding. Q4_1: d = (max − min) / 15, codes off by ≤ d / 2; the f16 scale and minimum
        // add their roundings; the f32 q · d + m its own.
        ElementFormat::Int4 { kind } => x
            .chunks(32)
            .flat_map(|b| {
                let b64: Vec<f64> = b.iter().map(|&v| v as f64).collect();
                let amax = b64.iter().fold(0f64, |m, v| m.max(v.abs()));
                let min = b64.iter().fold(f64::INFINITY, |m, &v| m.min(v));
                let max = b64.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
                let f16 = |v: f64| (v.abs() * p(-11)).max(p(-25));
                let bound = if kind == edgekv::quant::Q4Kind::Q4_0 {
                    let d = amax / 8.0;
                    d * (1.0 + p(-20)) + 8.0 * f16(d)
                } else {
                    let d = (max - min) / 15.0;
                    d * (0.5 + p(-20)) + 15.0 * f16(d) + f16(min) + (15.0 * d + min.abs()) * p(-23)
                };
                std::iter::repeat_n(bound, b.len())
            })
            .collect(),
        other => panic!("no bound for {other:?}"),
    }
}

/// [`delta`] of a head row stored rotated by `rot`: the bound of each element of the rotated row
/// (`H · S · x`), carried back through `S · H`, whose entries are `±1 / √HD`: every element's
/// error is at most `Σ_j δ_j / √HD`, plus the f32 rounding of the two transforms.
fn delta_rotated(format: ElementFormat, rot: Rotation, x: &[f32]) -> Vec<f64> {
    if rot == Rotation::None {
        return delta(format, x);
    }
    let mut y = x.to_vec();
    rot.forward(&mut y);
    let spread = delta(format, &y).iter().sum::<f64>() / (HD as f64).sqrt();
    let norm = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
    vec![spread + norm * 2f64.powi(-19); x.len()]
}

/// Dense model of one sequence: per layer, original K and V rows and their rounding bounds.
#[derive(Clone, Default)]
struct Dense {
    k: [Vec<f32>; LAYERS],
    v: [Vec<f32>; LAYERS],
    dk: [Vec<f64>; LAYERS],
    dv: [Vec<f64>; LAYERS],
}

/// Mirrors a case's events into dense sequences and checks every attention block.
struct Checker {
    formats: (ElementFormat, ElementFormat),
    rotations: (Rotation, Rotation),
    seqs: BTreeMap<u8, Dense>,
    /// (|got − ref|, derived bound) per output element.
    errs: Vec<(f64, f64)>,
    max_ref: f64,
    outputs: Vec<f32>,
    crc: OutputCrc,
    blocks: usize,
    /// Pages released by slides, and the most pages in use after one.
    released: u32,
    peak_pages: u16,
}

impl Checker {
    fn new(case: Case) -> Self {
        Checker {
            formats: case.formats(),
            rotations: case.rotations(),
            seqs: BTreeMap::new(),
            errs: Vec::new(),
            max_ref: 0.0,
            outputs: Vec::new(),
            crc: OutputCrc::new(),
            blocks: 0,
            released: 0,
            peak_pages: 0,
        }
    }

    fn event(&mut self, e: Event<'_>) {
        match e {
            Event::Rows {
                seq,
                layer,
                start,
                k,
                v,
            } => {
                let d = self.seqs.entry(seq).or_default();
                let l = layer as usize;
                let at = start as usize * KV_ROW;
                let end = at + k.len();
                assert!(at <= d.k[l].len(), "rows written past the end");
                for vec in [&mut d.k[l], &mut d.v[l]] {
                    vec.resize(vec.len().max(end), 0.0);
                }
                for vec in [&mut d.dk[l], &mut d.dv[l]] {
                    vec.resize(vec.len().max(end), 0.0);
                }
                d.k[l][at..end].copy_from_slice(k);
                d.v[l][at..end].copy_from_slice(v);
                for (i, (kh, vh)) in k.chunks(HD).zip(v.chunks(HD)).enumerate() {
                    let o = at + i * HD;
                    let (kr, vr) = self.rotations;
                    d.dk[l][o..o + HD].copy_from_slice(&delta_rotated(self.formats.0, kr, kh));
                    d.dv[l][o..o + HD].copy_from_slice(&delta_rotated(self.formats.1, vr, vh));
                }
            }
            Event::Fork { parent, child } => {
                let d = self.seqs[&parent].clone();
                self.seqs.insert(child, d);
            }
            Event::Truncate { seq, len } => {
                let d = self.seqs.get_mut(&seq).unwrap();
                let n = len as usize * KV_ROW;
                for l in 0..LAYERS {
                    d.k[l].truncate(n);
                    d.v[l].truncate(n);
                    d.dk[l].truncate(n);
                    d.dv[l].truncate(n);
                }
            }
            Event::Slide {
                from,
                released,
                pages_used,
                ..
            } => {
                // One sequence: it keeps its pages below ceil(from / P) except those wholly
                // inside [sinks, from + 1 − window), which are released.
                let p = edgekv_parity::PAGE_TOKENS as u32;
                let (sinks, window) = edgekv_parity::WINDOW;
                let visible = (from + 1).saturating_sub(window);
                let gone = (visible / p).saturating_sub(sinks.div_ceil(p));
                assert_eq!(
                    pages_used as u32,
                    from.div_ceil(p) - gone,
                    "pages after slide"
                );
                self.released += released as u32;
                self.peak_pages = self.peak_pages.max(pages_used);
            }
            Event::Attention {
                seq,
                layer,
                start,
                params,
                q,
                out,
            } => {
                self.blocks += 1;
                self.outputs.extend_from_slice(out);
                self.crc.update(out);
                let d = &self.seqs[&seq];
                let l = layer as usize;
                assert_eq!(params.q_heads, Q_HEADS);
                for (r, (qrow, orow)) in q.chunks(Q_ROW).zip(out.chunks(Q_ROW)).enumerate() {
                    let t = start as usize + r;
                    assert!((t + 1) * KV_ROW <= d.k[l].len(), "query past the rows");
                    let keys: Vec<usize> = (0..=t)
                        .filter(|&j| {
                            params
                                .window
                                .is_none_or(|w| j < w.sinks as usize || t - j < w.window as usize)
                        })
                        .collect();
                    for h in 0..Q_HEADS as usize {
                        let at = |j: usize| j * KV_ROW + (h / GROUP) * HD;
                        let qh = &qrow[h * HD..(h + 1) * HD];
                        let scale = params.scale as f64;
                        let scores: Vec<f64> = keys
                            .iter()
                            .map(|&j| {
                                let kr = &d.k[l][at(j)..at(j) + HD];
                                scale
                                    * qh.iter()
                                        .zip(kr)
                                        .map(|(a, b)| *a as f64 * *b as f64)
                                        .sum::<f64>()
                            })
                            .collect();
                        // Per-key bounds of the score errors, then of the weight ratios.
                        let e: Vec<f64> = keys
                            .iter()
                            .map(|&j| {
                                let dk = &d.dk[l][at(j)..at(j) + HD];
                                scale
                                    * qh.iter()
                                        .zip(dk)
                                        .map(|(a, b)| a.abs() as f64 * b)
                                        .sum::<f64>()
                            })
                            .collect();
                        let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                        let total: f64 = w.iter().sum();
                        let p: Vec<f64> = w.iter().map(|x| x / total).collect();
                        let z_lo: f64 = p.iter().zip(&e).map(|(p, e)| p * (-e).exp()).sum();
                        let z_hi: f64 = p.iter().zip(&e).map(|(p, e)| p * e.exp()).sum();
                        let up: Vec<f64> = e.iter().map(|e| e.exp() / z_lo).collect();
                        let g: Vec<f64> = e
                            .iter()
                            .zip(&up)
                            .map(|(e, u)| (u - 1.0).max(1.0 - (-e).exp() / z_hi))
                            .collect();
                        // Per channel: o, range of v, max Δv and Σ p_j u_j Δv_j (keys outer).
                        let mut o = [0f64; HD];
                        let mut lo = [f64::INFINITY; HD];
                        let mut hi = [f64::NEG_INFINITY; HD];
                        let mut eta_max = [0f64; HD];
                        let mut eta_mix = [0f64; HD];
                        for (n, &j) in keys.iter().enumerate() {
                            let vr = &d.v[l][at(j)..at(j) + HD];
                            let dr = &d.dv[l][at(j)..at(j) + HD];
                            for i in 0..HD {
                                let v = vr[i] as f64;
                                o[i] += p[n] * v;
                                lo[i] = lo[i].min(v);
                                hi[i] = hi[i].max(v);
                                eta_max[i] = eta_max[i].max(dr[i]);
                                eta_mix[i] += p[n] * up[n] * dr[i];
                            }
                        }
                        // Σ p_j g_j |v_j − c| for c = the midpoint and c = o: both bound the
                        // weight term.
                        let mut spread_mid = [0f64; HD];
                        let mut spread_o = [0f64; HD];
                        for (n, &j) in keys.iter().enumerate() {
                            let vr = &d.v[l][at(j)..at(j) + HD];
                            let pg = p[n] * g[n];
                            for i in 0..HD {
                                let v = vr[i] as f64;
                                spread_mid[i] += pg * (v - (lo[i] + hi[i]) / 2.0).abs();
                                spread_o[i] += pg * (v - o[i]).abs();
                            }
                        }
                        for i in 0..HD {
                            let o = o[i];
                            let bound = spread_mid[i].min(spread_o[i]) + eta_max[i].min(eta_mix[i]);
                            let got = orow[h * HD + i] as f64;
                            self.errs.push(((got - o).abs(), bound));
                            self.max_ref = self.max_ref.max(o.abs());
                        }
                    }
                }
            }
        }
    }
}

/// What one run of a case measured.
struct Outcome {
    digest: Digest,
    outputs: Vec<f32>,
    /// max |got − ref| / max |ref|.
    rel_err: f64,
    /// max derived bound / max |ref|.
    rel_bound: f64,
    /// max over elements of |got − ref| / (bound + 1e-5·max |ref|).
    worst_ratio: f64,
    blocks: usize,
    released: u32,
    peak_pages: u16,
}

/// Runs `case` with a sink that only counts, and returns its digest.
fn digest_only(case: Case) -> Digest {
    let mut data = vec![MaybeUninit::<u8>::uninit(); DATA_BYTES];
    let mut meta = vec![MaybeUninit::<u8>::uninit(); META_BYTES];
    let mut work = vec![0f32; WORK_F32];
    let mut arenas = Arenas {
        data: &mut data,
        meta: &mut meta,
        work: &mut work,
    };
    let mut crc = OutputCrc::new();
    let digest = run(case, &mut arenas, &mut |e| {
        if let Event::Attention { out, .. } = e {
            crc.update(out);
        }
    })
    .unwrap_or_else(|e| panic!("{}: {e}", case.name()));
    assert_eq!(crc.values(), digest.outputs);
    assert_eq!(crc.finish(), digest.crc32);
    digest
}

fn run_case(case: Case) -> Outcome {
    let mut data = vec![MaybeUninit::<u8>::uninit(); DATA_BYTES];
    let mut meta = vec![MaybeUninit::<u8>::uninit(); META_BYTES];
    let mut work = vec![0f32; WORK_F32];
    let mut arenas = Arenas {
        data: &mut data,
        meta: &mut meta,
        work: &mut work,
    };
    let mut checker = Checker::new(case);
    let digest = run(case, &mut arenas, &mut |e| checker.event(e))
        .unwrap_or_else(|e| panic!("{}: {e}", case.name()));
    assert_eq!(digest.case, case);
    assert_eq!(digest.name(), case.name());
    assert_eq!(digest.outputs as usize, checker.outputs.len());
    let crc = std::mem::take(&mut checker.crc);
    assert_eq!(
        crc.finish(),
        digest.crc32,
        "{}: digest of the sink's outputs",
        case.name()
    );
    let max_ref = checker.max_ref.max(1e-30);
    let slack = 1e-5 * max_ref;
    let (mut err, mut bound, mut ratio) = (0f64, 0f64, 0f64);
    for &(e, b) in &checker.errs {
        err = err.max(e);
        bound = bound.max(b);
        ratio = ratio.max(e / (b + slack));
    }
    Outcome {
        digest,
        outputs: checker.outputs,
        rel_err: err / max_ref,
        rel_bound: bound / max_ref,
        worst_ratio: ratio,
        blocks: checker.blocks,
        released: checker.released,
        peak_pages: checker.peak_pages,
    }
}

/// Runs `case` and asserts its outputs are within 1e-5 (relative) of the dense reference.
fn assert_dense_f32(case: Case) -> Outcome {
    assert_eq!(case.formats(), (ElementFormat::F32, ElementFormat::F32));
    let o = run_case(case);
    println!(
        "{}: {} blocks, max rel error {:.3e}",
        case.name(),
        o.blocks,
        o.rel_err
    );
    assert!(o.blocks > 0);
    assert!(o.rel_err <= 1e-5, "{}: {:e}", case.name(), o.rel_err);
    o
}

/// Runs `case` and asserts every element is within its derived bound.
fn assert_within_bound(case: Case) -> Outcome {
    let o = run_case(case);
    println!(
        "{} ({:?}): {} blocks, measured max rel error {:.3e}, derived bound {:.3e}, \
         worst error/bound {:.3}",
        case.name(),
        case.formats(),
        o.blocks,
        o.rel_err,
        o.rel_bound,
        o.worst_ratio
    );
    assert!(o.blocks > 0);
    assert!(
        o.worst_ratio <= 1.0,
        "{}: error above the derived bound ({})",
        case.name(),
        o.worst_ratio
    );
    o
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn paged_f32_matches_dense() {
    assert_dense_f32(Case::PagedF32);
}

#[test]
fn quantized_formats_within_derived_bounds() {
    for case in [
        Case::PagedF16,
        Case::PagedBf16,
        Case::PagedQ8_0,
        Case::PagedInt8Head,
        Case::PagedFp8Tile,
        Case::PagedQ4_0,
        Case::PagedQ4_1,
        Case::PagedQ8KQ4V,
        Case::PagedQ4_0Rot,
        Case::PagedQ8KQ4VRot,
    ] {
        let o = assert_within_bound(case);
        // The same inputs as the f32 case: a nonzero error shows the format was applied.
        assert!(o.rel_err > 0.0, "{}: no rounding at all?", case.name());
    }
}

/// Queries × 24 over Q8_0 pages: scores hundreds apart, so most weights are subnormal or zero
/// (the case boards with flush-to-zero vector floats must still match); within the bound too.
#[test]
fn sharp_scores_within_derived_bound() {
    let o = assert_within_bound(Case::PagedQ8_0Sharp);
    assert!(o.rel_err > 0.0);
}

#[test]
fn chunked_prefill_equals_one_pass() {
    let chunked = assert_within_bound(Case::Chunked);
    let one = assert_within_bound(Case::OnePass);
    assert!(chunked.blocks > one.blocks);
    assert_eq!(bits(&chunked.outputs), bits(&one.outputs));
    assert_eq!(chunked.digest.crc32, one.digest.crc32);
}

#[test]
fn prefix_reuse_equals_cold_prefill() {
    let warm = assert_within_bound(Case::PrefixWarm);
    let cold = assert_within_bound(Case::PrefixCold);
    assert!(!warm.outputs.is_empty());
    assert_eq!(bits(&warm.outputs), bits(&cold.outputs));
    assert_eq!(warm.digest.crc32, cold.digest.crc32);
}

#[test]
fn fork_and_truncate_match_dense() {
    assert_dense_f32(Case::ForkDiverge);
    assert_dense_f32(Case::TruncateReappend);
}

#[test]
fn sliding_window_matches_masked_dense() {
    let w = assert_dense_f32(Case::WindowSinks);
    let full = digest_only(Case::PagedF32);
    // Same inputs: the window must have changed the outputs once it cuts keys off.
    assert_eq!(w.digest.outputs, full.outputs);
    assert_ne!(w.digest.crc32, full.crc32);
    // Releasing the pages outside the window changes nothing but memory.
    let slid = assert_dense_f32(Case::WindowSlide);
    println!(
        "window_slide: {} pages released, at most {} in use after a slide (of {})",
        slid.released,
        slid.peak_pages,
        edgekv_parity::MAX_TOKENS / edgekv_parity::PAGE_TOKENS as u32
    );
    assert!(slid.released > 0);
    assert_eq!(bits(&slid.outputs), bits(&w.outputs));
    assert_eq!(slid.digest.crc32, w.digest.crc32);
}

#[test]
fn digests_are_stable() {
    println!(
        "arenas: data {DATA_BYTES} B, meta {META_BYTES} B, work {} B",
        WORK_F32 * 4
    );
    let mut names = std::collections::HashSet::new();
    for &case in CASES {
        let a = digest_only(case);
        let b = digest_only(case);
        println!("{a}");
        assert_eq!(a, b, "{}", case.name());
        assert!(names.insert(a.name().to_owned()), "duplicate name");
        assert_eq!(Case::from_name(a.name()), Some(case));
        assert_eq!(
            a.to_string(),
            format!("case {} crc32 {:08x}", case.name(), a.crc32)
        );
    }
}

#[test]
fn arenas_of_any_alignment_and_too_small_ones() {
    let want = digest_only(Case::OnePass);
    let mut data = vec![MaybeUninit::<u8>::uninit(); DATA_BYTES + 64];
    let mut meta = vec![MaybeUninit::<u8>::uninit(); META_BYTES + 64];
    let mut work = vec![0f32; WORK_F32];
    let (d, m) = (
        data.as_ptr().align_offset(64),
        meta.as_ptr().align_offset(64),
    );
    // One byte past an alignment: the run cuts aligned parts out of the arenas.
    let mut arenas = Arenas {
        data: &mut data[d + 1..d + 1 + DATA_BYTES],
        meta: &mut meta[m + 1..m + 1 + META_BYTES],
        work: &mut work,
    };
    assert_eq!(run(Case::OnePass, &mut arenas, &mut |_| {}), Ok(want));
    let too_small = Err(edgekv_parity::Error::Cache(
        edgekv::ConfigError::ArenaTooSmall.into(),
    ));
    let mut short = Arenas {
        data: &mut data[d..d + edgekv_parity::DATA_USED - 1],
        meta: &mut meta,
        work: &mut work,
    };
    assert_eq!(run(Case::OnePass, &mut short, &mut |_| {}), too_small);
    let mut short = Arenas {
        data: &mut data,
        meta: &mut meta[m..m + 16],
        work: &mut work,
    };
    assert_eq!(run(Case::OnePass, &mut short, &mut |_| {}), too_small);
    let mut short = Arenas {
        data: &mut data,
        meta: &mut meta,
        work: &mut work[..WORK_F32 - 1],
    };
    assert_eq!(
        run(Case::OnePass, &mut short, &mut |_| {}),
        Err(edgekv_parity::Error::WorkTooSmall)
    );
}

#[test]
fn restored_snapshot_decodes_like_a_cold_prefill() {
    use edgekv::snapshot::RamFlash;
    use edgekv_parity::snapshot::{decode_after_image, write_image};
    let cold = assert_within_bound(Case::SnapshotCold);
    let mut data = vec![MaybeUninit::uninit(); DATA_BYTES];
    let mut meta = vec![MaybeUninit::uninit(); META_BYTES];
    let mut work = vec![0f32; WORK_F32];
    let mut arenas = Arenas {
        data: &mut data,
        meta: &mut meta,
        work: &mut work,
    };
    let mut mem = vec![0u8; 128 * 1024];
    let mut flash = RamFlash::<16, 4096>::new(&mut mem);
    let header = write_image(&mut arenas, &mut flash).unwrap();
    assert_eq!((header.tokens, header.pages), (48, 3));
    let image = &mem[..header.image as usize];
    let mut buf = vec![0u8; edgekv_parity::snapshot::IMAGE_MAX];
    let into = edgekv_parity::snapshot::write_image_into(&mut arenas, &mut buf).unwrap();
    assert_eq!(into, image, "write_image_into writes the same image");
    let restored = decode_after_image(image, &mut arenas).unwrap();
    assert_eq!(restored.name(), "snapshot_restored");
    assert_eq!(
        (restored.crc32, restored.outputs),
        (cold.digest.crc32, cold.digest.outputs),
        "restored == cold, bit for bit"
    );
    assert_eq!(
        run(Case::SnapshotRestored, &mut arenas, &mut |_| {}),
        Err(edgekv_parity::Error::NeedsImage)
    );
    let mut bad = image.to_vec();
    bad[100] ^= 0x10;
    assert_eq!(
        decode_after_image(&bad, &mut arenas),
        Err(edgekv_parity::Error::Snapshot(
            edgekv::snapshot::SnapshotError::CrcMismatch
        ))
    );
}

/// This machine prints the committed digest listing (`parity/digests.txt`), line for line: the
/// aarch64 build under emulation (`cargo test-all`'s aarch64 stage) and the boards are compared
/// with the same file. After a change of numerics made on purpose, regenerate it:
/// `EDGEKV_BLESS=1 cargo test -p edgekv-host-tests --test parity digest_listing`.
#[test]
fn digest_listing_is_the_committed_one() {
    let mut data = vec![MaybeUninit::<u8>::uninit(); DATA_BYTES];
    let mut meta = vec![MaybeUninit::<u8>::uninit(); META_BYTES];
    let mut work = vec![0f32; WORK_F32];
    let mut arenas = Arenas {
        data: &mut data,
        meta: &mut meta,
        work: &mut work,
    };
    let mut step_arena = vec![MaybeUninit::<u8>::uninit(); edgekv_parity::STEP_SHAPES_ARENA_BYTES];
    let mut step_work = vec![0f32; edgekv_parity::STEP_SHAPES_WORK_F32];
    let mut listing = String::new();
    edgekv_parity::digest_listing(&mut arenas, &mut step_arena, &mut step_work, &mut |l| {
        listing.push_str(&format!("{l}\n"))
    })
    .expect("the listing");
    if std::env::var_os("EDGEKV_BLESS").is_some() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../parity/digests.txt");
        std::fs::write(&path, &listing).expect("write parity/digests.txt");
        eprintln!("wrote {} (rebuild to compare)", path.display());
        return;
    }
    assert_eq!(
        listing,
        edgekv_parity::DIGESTS,
        "the digests differ from parity/digests.txt (EDGEKV_BLESS=1 regenerates it)"
    );
}
