//! The matmul kernel check (`edgekv_llm::matmul::kernel_check`): every DSP matmul kernel of
//! this build (Cortex-M4: `SMLAD`) against the portable dot products on random rows and edge
//! values, each differing kernel and shape printed (`matmul_check mismatch …`), then
//! `matmul_check kernels … compared N declined N mismatches N`; the exit code is nonzero on any
//! mismatch; then the digest of the f32 loops on subnormal inputs
//! (`subnormal_check::subnormal_digest`) and the host's. `cargo run --release --bin
//! matmul-check`; CI runs it
//! (`host-tests/tests/board_matmul.rs`).
#![no_std]
#![no_main]

use cortex_m as _; // critical-section implementation for defmt
use cortex_m_rt::entry;
use defmt_semihosting as _;
use edgekv_llm::matmul::{kernel_check, kernels, quantize_activation, set_kernels};
use edgekv_llm::quant::{ActivationType, sums_len};
use edgekv_llm::subnormal_check;
use edgekv_board_clock as clock;

static WORK: static_cell::ConstStaticCell<kernel_check::Work> =
    static_cell::ConstStaticCell::new(kernel_check::Work::new());

#[entry]
fn main() -> ! {
    let Some(work) = WORK.try_take() else {
        semihosting::process::exit(2)
    };
    let sum = kernel_check::run(work, &mut |m| {
        defmt::println!(
            "matmul_check mismatch {=str} {=str} {=str} cols {=u16} rows {=u16} acts {=u16} at {=u16}",
            m.entry,
            m.ty,
            m.case.name(),
            m.cols,
            m.rows,
            m.acts,
            m.at
        )
    });
    defmt::println!(
        "matmul_check kernels {=str} compared {=u32} declined {=u32} mismatches {=u32}",
        kernels().unwrap_or("portable"),
        sum.compared,
        sum.declined,
        sum.mismatches
    );
    // The f32 loops around the matmuls on subnormal inputs: the host's bits.
    let subnormal = subnormal_check::subnormal_digest(work);
    defmt::println!(
        "matmul_check subnormal crc {=u32:08x} host {=u32:08x}",
        subnormal,
        subnormal_check::SUBNORMAL_DIGEST
    );
    // A different subnormal digest is reported (the host test compares and names the part),
    // not an exit code.
    let quantizers = quantizer_check(work);
    if let (Some(cp), Some(rows)) = (cortex_m::Peripherals::take(), ROWS.try_take()) {
        quantizer_count(cp.SYST, rows);
    }
    semihosting::process::exit(i32::from(sum.mismatches != 0 || quantizers != 0))
}

/// The activation quantizers' check (`kernel_check::run_quantizers`): each differing call
/// printed (`matmul_check quantizer mismatch …`), then `matmul_check quantizers … compared N
/// declined N mismatches N`. Returns the mismatches.
fn quantizer_check(work: &mut kernel_check::Work) -> u32 {
    let sum = kernel_check::run_quantizers(work, &mut |m| {
        defmt::println!(
            "matmul_check quantizer mismatch {=str} kind {=u16} short {=u8} block {=u16}",
            m.act,
            m.kind,
            m.short,
            m.block
        )
    });
    defmt::println!(
        "matmul_check quantizers {=str} compared {=u32} declined {=u32} mismatches {=u32}",
        kernels().unwrap_or("portable"),
        sum.compared,
        sum.declined,
        sum.mismatches
    );
    sum.mismatches
}

/// The widest activation row of [`TOKEN_ROWS`] (Gemma's FFN) and its quantized form.
struct Rows {
    x: [f32; 2048],
    qs: [i8; 2048],
    d: [f32; 64],
    s: [f32; 64],
}

static ROWS: static_cell::ConstStaticCell<Rows> = static_cell::ConstStaticCell::new(Rows {
    x: [0.0; 2048],
    qs: [0; 2048],
    d: [0.0; 64],
    s: [0.0; 64],
});

/// One decode token's activation rows (QEMU `-icount`: SysTick counts instructions): model,
/// activation type, values per row, rows per token (SmolLM2-135M, all Q4_1 weights: per layer
/// q/k/v's shared row, o's, gate/up's shared row and down's, 30 layers, then the Q8_0 head;
/// Gemma 3 270M: per layer q/k/v and gate/up in Q8_0 (Q5_0 / Q8_0 weights), o and down in
/// Q8_K (Q4_K / Q6_K), 18 layers, then the Q8_0 head).
const TOKEN_ROWS: [(&str, ActivationType, usize, u32); 6] = [
    ("smollm2", ActivationType::Q8_1, 576, 3 * 30),
    ("smollm2", ActivationType::Q8_1, 1536, 30),
    ("smollm2", ActivationType::Q8_0, 576, 1),
    ("gemma3", ActivationType::Q8_0, 640, 2 * 18 + 1),
    ("gemma3", ActivationType::Q8_K, 1024, 18),
    ("gemma3", ActivationType::Q8_K, 2048, 18),
];

/// Instructions of quantizing [`TOKEN_ROWS`] with this build's kernels and with the portable
/// code (`set_kernels(false)`, the same function the `portable` build runs), per row (the mean
/// of [`REPEATS`] rows of random values in ±8) and per token:
/// `quantize_count {model} {type} cols N rows N kernel N portable N`, then
/// `quantize_count {model} token kernel N portable N`.
fn quantizer_count(syst: cortex_m::peripheral::SYST, work: &mut Rows) {
    const REPEATS: u64 = 4;
    clock::start(syst);
    let per_m = clock::calibrate(1_000_000).max(1);
    let mut seed = 0x2545_f491u32;
    for v in work.x.iter_mut() {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        *v = (seed >> 8) as f32 / (1u32 << 20) as f32 - 8.0;
    }
    let mut totals = [("smollm2", 0u64, 0u64), ("gemma3", 0, 0)];
    for (model, act, cols, rows) in TOKEN_ROWS {
        let mut count = |on: bool| {
            set_kernels(on);
            let t0 = clock::now();
            for _ in 0..REPEATS {
                quantize_activation(
                    act,
                    &work.x[..cols],
                    &mut work.qs[..cols],
                    &mut work.d[..cols / act.block_values()],
                    &mut work.s[..sums_len(cols)],
                );
            }
            (clock::now() - t0) * 1_000_000 / per_m / REPEATS
        };
        let (kernel, portable) = (count(true), count(false));
        set_kernels(true);
        let name = match act {
            ActivationType::Q8_0 => "q8_0",
            ActivationType::Q8_1 => "q8_1",
            ActivationType::Q8_K => "q8_k",
        };
        defmt::println!(
            "quantize_count {=str} {=str} cols {=u32} rows {=u32} kernel {=u64} portable {=u64}",
            model,
            name,
            cols as u32,
            rows,
            kernel,
            portable
        );
        for t in totals.iter_mut().filter(|t| t.0 == model) {
            t.1 += kernel * u64::from(rows);
            t.2 += portable * u64::from(rows);
        }
    }
    for (model, kernel, portable) in totals {
        defmt::println!(
            "quantize_count {=str} token kernel {=u64} portable {=u64}",
            model,
            kernel,
            portable
        );
    }
}
