//! One SmolLM2-135M transformer block's matmuls for one token, counted (QEMU `-icount`: SysTick
//! counts instructions): q, k, v, o, gate, up, down at the model's shapes (hidden 576, FFN
//! 1,536, 9 query heads and 3 KV heads of 64) over synthetic Q4_1 weights (the an386's memory
//! cannot hold the model), each through `edgekv_llm::matmul::matmul_quant` with this build's
//! kernels (the DSP extension's `SMLAD` on the Cortex-M4), or with the portable code when built
//! with `--features portable`. Prints each matmul's instructions, the total and a CRC-32 of
//! every output's bits (the same in both builds: the kernels have the portable bits).
//!
//! Then one Gemma 3 270M block's matmuls the same way (hidden 640, FFN 2,048, 4 query heads
//! and 1 KV head of 256) over synthetic weights of the model's types (Q4_K_M file): q, k, gate,
//! up Q5_0, o Q4_K; its blocks come in two kinds, v Q8_0 with down Q6_K (the blocks llama.cpp
//! gives more bits) or v Q5_0 with down Q4_K, so both v and both down are counted, and a total
//! for each kind (`gemma3 … total six-bit … four-bit …`), with a CRC-32 of every output.
//! `cargo run --release --bin block-matmuls` (and again with `--features portable`).
#![no_std]
#![no_main]

use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::entry;
use defmt_semihosting as _;
use edgekv_board_clock as clock;
use edgekv_llm::gguf::TensorType;
use edgekv_llm::matmul::{Matrix, kernels, matmul_quant};
use edgekv_llm::quant::{
    ActivationType, BLOCK, q4_1, quantize_activation, quantize_q8_1, sums_len,
};
use static_cell::ConstStaticCell;

const HIDDEN: usize = 576;
const FFN: usize = 1536;
const KV: usize = 3 * 64;

/// The block's matmuls: name, output rows, input columns (in the forward pass's order).
const MATMULS: [(&str, usize, usize); 7] = [
    ("q", HIDDEN, HIDDEN),
    ("k", KV, HIDDEN),
    ("v", KV, HIDDEN),
    ("o", HIDDEN, HIDDEN),
    ("gate", FFN, HIDDEN),
    ("up", FFN, HIDDEN),
    ("down", HIDDEN, FFN),
];

/// Bytes of every matrix of [`MATMULS`] (Q4_1: 20 bytes per 32 values).
const WEIGHT_BYTES: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < MATMULS.len() {
        n += MATMULS[i].1 * MATMULS[i].2 / BLOCK * q4_1::BYTES;
        i += 1;
    }
    n
};

/// The weights, in PSRAM (2.2 MB), aligned as a GGUF file's tensor data is.
#[repr(C, align(32))]
struct Weights([MaybeUninit<u8>; WEIGHT_BYTES]);

#[unsafe(link_section = ".psram")]
static mut WEIGHTS: Weights = Weights([MaybeUninit::uninit(); WEIGHT_BYTES]);

/// Gemma 3 270M's widths: hidden, FFN, query rows (4 heads of 256), key / value rows (1 head).
const G_HIDDEN: usize = 640;
const G_FFN: usize = 2048;
const G_Q: usize = 4 * 256;
const G_KV: usize = 256;

/// Gemma 3's block matmuls: name, type, output rows, input columns (the forward pass's order;
/// the two kinds of v and of down each counted).
const GEMMA: [(&str, TensorType, usize, usize); 9] = [
    ("q", TensorType::Q5_0, G_Q, G_HIDDEN),
    ("k", TensorType::Q5_0, G_KV, G_HIDDEN),
    ("v-q8_0", TensorType::Q8_0, G_KV, G_HIDDEN),
    ("v-q5_0", TensorType::Q5_0, G_KV, G_HIDDEN),
    ("o", TensorType::Q4_K, G_HIDDEN, G_Q),
    ("gate", TensorType::Q5_0, G_FFN, G_HIDDEN),
    ("up", TensorType::Q5_0, G_FFN, G_HIDDEN),
    ("down-q6_k", TensorType::Q6_K, G_HIDDEN, G_FFN),
    ("down-q4_k", TensorType::Q4_K, G_HIDDEN, G_FFN),
];

/// Which of [`GEMMA`] a block of each kind runs: v Q8_0 and down Q6_K, or v Q5_0 and down Q4_K.
const SIX_BIT: [bool; 9] = [true, true, true, false, true, true, true, true, false];
const FOUR_BIT: [bool; 9] = [true, true, false, true, true, true, true, false, true];

/// `ty`'s bytes for `values` values (whole blocks).
const fn row_bytes(ty: TensorType, values: usize) -> usize {
    match ty.row_bytes(values) {
        Some(n) => n,
        None => panic!("whole blocks"),
    }
}

/// Bytes of every matrix of [`GEMMA`] (3.98 MB with both v and both down).
const GEMMA_BYTES: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < GEMMA.len() {
        n += GEMMA[i].2 * row_bytes(GEMMA[i].1, GEMMA[i].3);
        i += 1;
    }
    n
};

/// Gemma's weights, in PSRAM after SmolLM2's (16 MB in all), aligned as a GGUF file's tensor
/// data is.
#[repr(C, align(32))]
struct GemmaWeights([MaybeUninit<u8>; GEMMA_BYTES]);

#[unsafe(link_section = ".psram")]
static mut GEMMA_WEIGHTS: GemmaWeights = GemmaWeights([MaybeUninit::uninit(); GEMMA_BYTES]);

/// An activation row of up to [`G_FFN`] values quantized (Q8_0, Q8_1 or Q8_K), and the outputs.
struct Work {
    x: [f32; G_FFN],
    qs: [i8; G_FFN],
    d: [f32; G_FFN / BLOCK],
    s: [f32; G_FFN / BLOCK],
    out: [f32; G_FFN],
}

static WORK: ConstStaticCell<Work> = ConstStaticCell::new(Work {
    x: [0.0; G_FFN],
    qs: [0; G_FFN],
    d: [0.0; G_FFN / BLOCK],
    s: [0.0; G_FFN / BLOCK],
    out: [0.0; G_FFN],
});

/// xorshift32.
struct Rng(u32);

impl Rng {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }
}

/// Random Q4_1 blocks: codes uniform, `d` in [2^-10, 2^-3), `m` as large and negative (the
/// ranges of a trained model's blocks).
fn fill_weights(rng: &mut Rng, w: &mut [u8]) {
    for b in w.chunks_exact_mut(q4_1::BYTES) {
        let r = rng.next();
        let d = ((5 + (r & 7)) << 10) | ((r >> 3) & 0x3ff);
        let m = 0x8000 | ((5 + ((r >> 13) & 7)) << 10) | ((r >> 16) & 0x3ff);
        b[0..2].copy_from_slice(&(d as u16).to_le_bytes());
        b[2..4].copy_from_slice(&(m as u16).to_le_bytes());
        for c in b[4..].chunks_mut(4) {
            let r = rng.next().to_le_bytes();
            c.copy_from_slice(&r[..c.len()]);
        }
    }
}

/// A random f16 scale in ±[2^-10, 2^-3) (positive when `positive`), as [`fill_weights`]'s.
fn scale(rng: &mut Rng, positive: bool) -> [u8; 2] {
    let r = rng.next();
    let sign = if positive { 0 } else { (r >> 15) & 0x8000 };
    let h = sign | ((5 + (r & 7)) << 10) | ((r >> 3) & 0x3ff);
    (h as u16).to_le_bytes()
}

/// Random blocks of `ty` (Gemma's types): codes, `qh` bits and packed scales uniform, f16
/// scales as [`scale`] (Q4_K's `d`, `dmin` positive, as its format has them); Q6_K's i8 scales
/// uniform in −64..64.
fn fill_gemma(rng: &mut Rng, ty: TensorType, w: &mut [u8]) {
    for b in w.chunks_exact_mut(ty.block_bytes()) {
        for c in b.chunks_mut(4) {
            let r = rng.next().to_le_bytes();
            c.copy_from_slice(&r[..c.len()]);
        }
        match ty {
            TensorType::Q4_K => {
                let (d, dmin) = (scale(rng, true), scale(rng, true));
                b[0..2].copy_from_slice(&d);
                b[2..4].copy_from_slice(&dmin);
            }
            TensorType::Q6_K => {
                for s in &mut b[192..208] {
                    *s = (*s as i8 >> 1) as u8;
                }
                let d = scale(rng, false);
                b[208..210].copy_from_slice(&d);
            }
            _ => {
                let d = scale(rng, false);
                b[0..2].copy_from_slice(&d);
            }
        }
    }
}

/// CRC-32 (IEEE, reflected) of `bytes`, continuing `crc`.
fn crc32(mut crc: u32, bytes: &[u8]) -> u32 {
    crc = !crc;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

#[entry]
fn main() -> ! {
    let (Some(cp), Some(work)) = (cortex_m::Peripherals::take(), WORK.try_take()) else {
        semihosting::process::exit(2)
    };
    // SAFETY: `WORK` was taken just above, which happens once, so this is the only reference to
    // `WEIGHTS` ever made.
    let weights = unsafe { &mut (*addr_of_mut!(WEIGHTS)).0 };
    let mut rng = Rng(0x2545_f491);
    for b in weights.iter_mut() {
        b.write(0);
    }
    // SAFETY: every byte was written just above.
    let weights: &mut [u8] =
        unsafe { core::slice::from_raw_parts_mut(weights.as_mut_ptr().cast(), WEIGHT_BYTES) };
    fill_weights(&mut rng, weights);
    clock::start(cp.SYST);
    let per_m = clock::calibrate(1_000_000).max(1);
    let name = kernels().unwrap_or("portable");
    let (mut total, mut crc, mut at) = (0u64, 0u32, 0usize);
    for (matrix, rows, cols) in MATMULS {
        let row_bytes = cols / BLOCK * q4_1::BYTES;
        let m = Matrix {
            data: &weights[at..][..rows * row_bytes],
            ty: TensorType::Q4_1,
            cols,
            rows,
            row_bytes,
        };
        at += rows * row_bytes;
        for v in &mut work.x[..cols] {
            *v = (rng.next() >> 8) as f32 / (1u32 << 23) as f32 - 1.0;
        }
        let blocks = cols / BLOCK;
        quantize_q8_1(
            &work.x[..cols],
            &mut work.qs[..cols],
            &mut work.d[..blocks],
            &mut work.s[..blocks],
        );
        let out = &mut work.out[..rows];
        let t0 = clock::now();
        matmul_quant(
            &m,
            &work.qs[..cols],
            &work.d[..blocks],
            &work.s[..blocks],
            1,
            out,
        );
        let n = (clock::now() - t0) * 1_000_000 / per_m;
        total += n;
        for v in out.iter() {
            crc = crc32(crc, &v.to_bits().to_le_bytes());
        }
        defmt::println!(
            "block_matmuls {=str} {=str} rows {=u32} cols {=u32} instructions {=u64}",
            name,
            matrix,
            rows as u32,
            cols as u32,
            n
        );
    }
    defmt::println!(
        "block_matmuls {=str} total instructions {=u64} crc32 {=u32:08x}",
        name,
        total,
        crc
    );

    // Gemma 3 270M's block.
    // SAFETY: `WORK` was taken above, which happens once, so this is the only reference to
    // `GEMMA_WEIGHTS` ever made.
    let weights = unsafe { &mut (*addr_of_mut!(GEMMA_WEIGHTS)).0 };
    for b in weights.iter_mut() {
        b.write(0);
    }
    // SAFETY: every byte was written just above.
    let weights: &mut [u8] =
        unsafe { core::slice::from_raw_parts_mut(weights.as_mut_ptr().cast(), GEMMA_BYTES) };
    let mut rng = Rng(0x6e3a_0270);
    let mut at = 0;
    for (_, ty, rows, cols) in GEMMA {
        let n = rows * row_bytes(ty, cols);
        fill_gemma(&mut rng, ty, &mut weights[at..][..n]);
        at += n;
    }
    let (mut six, mut four, mut crc, mut at) = (0u64, 0u64, 0u32, 0usize);
    for (i, (matrix, ty, rows, cols)) in GEMMA.into_iter().enumerate() {
        let row_bytes = row_bytes(ty, cols);
        let m = Matrix {
            data: &weights[at..][..rows * row_bytes],
            ty,
            cols,
            rows,
            row_bytes,
        };
        at += rows * row_bytes;
        for v in &mut work.x[..cols] {
            *v = (rng.next() >> 8) as f32 / (1u32 << 23) as f32 - 1.0;
        }
        let act = ActivationType::for_weights(ty).unwrap_or(ActivationType::Q8_0);
        let (blocks, sums) = (cols / act.block_values(), sums_len(cols));
        quantize_activation(
            act,
            &work.x[..cols],
            &mut work.qs[..cols],
            &mut work.d[..blocks],
            &mut work.s[..sums],
        );
        let out = &mut work.out[..rows];
        let t0 = clock::now();
        matmul_quant(
            &m,
            &work.qs[..cols],
            &work.d[..blocks],
            &work.s[..sums],
            1,
            out,
        );
        let n = (clock::now() - t0) * 1_000_000 / per_m;
        six += if SIX_BIT[i] { n } else { 0 };
        four += if FOUR_BIT[i] { n } else { 0 };
        for v in out.iter() {
            crc = crc32(crc, &v.to_bits().to_le_bytes());
        }
        defmt::println!(
            "block_matmuls gemma3 {=str} {=str} rows {=u32} cols {=u32} instructions {=u64}",
            name,
            matrix,
            rows as u32,
            cols as u32,
            n
        );
    }
    defmt::println!(
        "block_matmuls gemma3 {=str} total six-bit {=u64} four-bit {=u64} crc32 {=u32:08x}",
        name,
        six,
        four,
        crc
    );
    semihosting::process::exit(0)
}
