//! What the K-quant kernels (Q4_K, Q6_K × Q8_K) share with the DSP extension: the activation
//! row expanded into `SMLAD` pairs once per call ([`expand`]), the f32 state of one dot product
//! in the portable order ([`Lanes`], as `quant/k_lanes.rs`), and the row loop ([`rows`]).
//!
//! The portable K-quant dot products sum, per super-block, eight i32 lanes `aux32[l]` over the
//! values `k ≡ l (mod 8)`, each 16-value group `g` (one scale) giving lane `l` the two values
//! `16g + l` and `16g + 8 + l`: exactly one `SMLAD` pair. So the activation pairs are
//! `(x[16g + l], x[16g + 8 + l])`, word `8g + l` of a super-block's 128, and a kernel builds
//! the weights' matching pairs from bytes 8 apart (`PKHBT` / `PKHTB` of two words, then `AND`s
//! with shifts), never adding two lanes. The f32 steps on the scalar FPU, as the portable code.

use super::insn::{code_word, halves, sxtb16, sxtb16_ror8};
use crate::gguf::QK_K;
use crate::quant::QuantRow;

/// Words per expanded super-block: the 128 pairs.
pub(super) const WORDS: usize = QK_K / 2;

/// Super-blocks expanded at a time (Gemma 3's 1,024-value rows in one chunk, its 2,048-value
/// FFN rows in two): 4 × 128 words (2 KB) of stack.
const CHUNK: usize = 4;

/// Weight rows carried through the chunks together: a row's f32 state waits between chunks
/// ([`Lanes`], 36 bytes each), and a row longer than one chunk expands each chunk once per
/// [`GROUP`] rows.
const GROUP: usize = 8;

/// The f32 state of one K-quant dot product, as the portable `Lanes`.
#[derive(Clone, Copy)]
pub(super) struct Lanes {
    /// The eight lane sums.
    sums: [f32; 8],
    /// The minimums' sum.
    sumf: f32,
}

impl Lanes {
    /// Zero (+0.0, as the portable sums start).
    const fn new() -> Self {
        Lanes {
            sums: [0.0; 8],
            sumf: 0.0,
        }
    }

    /// Adds one super-block's integer lanes: `sums[l] += d · (f32)aux32[l]`.
    #[inline(always)]
    pub(super) fn add(&mut self, aux32: &[i32; 8], d: f32) {
        for (s, &v) in self.sums.iter_mut().zip(aux32) {
            *s += d * v as f32;
        }
    }

    /// Subtracts one super-block's minimum term `dmin · (f32)sumi`.
    #[inline(always)]
    pub(super) fn minus(&mut self, dmin: f32, sumi: i32) {
        self.sumf -= dmin * sumi as f32;
    }

    /// The dot product: `sumf` plus the lanes in order.
    #[inline(always)]
    fn total(self) -> f32 {
        let mut sumf = self.sumf;
        for s in self.sums {
            sumf += s;
        }
        sumf
    }
}

/// Super-blocks `from..from + out.len() / 128` of `a` as the kernels read them: word `8g + l`
/// of each the pair `(x[16g + l], x[16g + 8 + l])` (per 16 codes: `PKHBT` / `PKHTB` of the
/// words 8 codes apart, then `SXTB16`). The caller keeps them within `a`.
fn expand(a: &QuantRow<'_>, from: usize, out: &mut [u32]) {
    for (b, x) in (from..).zip(out.chunks_exact_mut(WORDS)) {
        let q = &a.qs[b * QK_K..][..QK_K];
        for (x8, q16) in x.chunks_exact_mut(8).zip(q.chunks_exact(16)) {
            for (k, x4) in x8.chunks_exact_mut(4).enumerate() {
                let [p, r] = halves(code_word(q16, 4 * k), code_word(q16, 4 * k + 8));
                x4[0] = sxtb16(p);
                x4[1] = sxtb16_ror8(p);
                x4[2] = sxtb16(r);
                x4[3] = sxtb16_ror8(r);
            }
        }
    }
}

/// `out[o]` = the K-quant dot product of weight row `o` of `w` (rows of `row_bytes` bytes, as
/// many as `out` holds, any alignment) with `a`, by groups of [`GROUP`] rows carried through
/// the chunks of [`CHUNK`] expanded super-blocks, each super-block added by `block`
/// (`BYTES` bytes each; `bsums`: whether the portable dot product zips the 16-value sums, which
/// bounds the super-blocks it reads). `false` (nothing written) when `w` does not hold the rows.
#[inline(always)]
pub(super) fn rows<const BYTES: usize>(
    w: &[u8],
    row_bytes: usize,
    a: &QuantRow<'_>,
    out: &mut [f32],
    bsums: bool,
    block: impl Fn(&mut Lanes, &[u8; BYTES], &[u32; WORDS], f32, &[i16]),
) -> bool {
    let fits = out
        .len()
        .checked_mul(row_bytes)
        .is_some_and(|b| b <= w.len());
    if !fits {
        return false;
    }
    let mut blocks = (row_bytes / BYTES).min(a.qs.len() / QK_K).min(a.d.len());
    if bsums {
        blocks = blocks.min(a.bsums.len() / 16);
    }
    let mut x = [0u32; CHUNK * WORDS];
    let once = blocks <= CHUNK;
    if once {
        expand(a, 0, &mut x[..blocks * WORDS]);
    }
    for (g, out) in out.chunks_mut(GROUP).enumerate() {
        let mut lanes = [Lanes::new(); GROUP];
        let mut from = 0;
        while from < blocks {
            let nb = (blocks - from).min(CHUNK);
            if !once {
                expand(a, from, &mut x[..nb * WORDS]);
            }
            for (o, lanes) in lanes.iter_mut().take(out.len()).enumerate() {
                let row = &w[(g * GROUP + o) * row_bytes + from * BYTES..][..nb * BYTES];
                for (i, (wb, xb)) in row
                    .chunks_exact(BYTES)
                    .zip(x.chunks_exact(WORDS))
                    .enumerate()
                {
                    let b = from + i;
                    let (Ok(wb), Ok(xb)) =
                        (<&[u8; BYTES]>::try_from(wb), <&[u32; WORDS]>::try_from(xb))
                    else {
                        continue;
                    };
                    let sums = if bsums {
                        &a.bsums[b * 16..][..16]
                    } else {
                        &[][..]
                    };
                    block(lanes, wb, xb, a.d[b], sums);
                }
            }
            from += nb;
        }
        for (r, lanes) in out.iter_mut().zip(lanes) {
            *r = lanes.total();
        }
    }
    true
}
