//! The cases: what each one runs, and the formats and window it uses.

use super::*;

/// A named, fixed parity case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Case {
    /// f32 pages: prefill 144 tokens in chunks of 32, decode 16 more; every output.
    PagedF32,
    /// As [`PagedF32`](Case::PagedF32) (same inputs) over f16 K and V pages.
    PagedF16,
    /// Same inputs over bf16 pages.
    PagedBf16,
    /// Same inputs over int8 pages, groups of 32 (ggml Q8_0).
    PagedQ8_0,
    /// The K and V rows of [`PagedQ8_0`](Case::PagedQ8_0), queries × [`SHARP`]: scores hundreds
    /// apart, many weights subnormal or zero (where vector floats that flush subnormals to zero
    /// would differ).
    PagedQ8_0Sharp,
    /// Same inputs over int8 pages, one scale per token and head (group = head_dim).
    PagedInt8Head,
    /// Same inputs over FP8 E4M3 tile pages (`dv` 48, tiles of 16, f32 scales and tail).
    PagedFp8Tile,
    /// Same inputs over 4-bit pages with ggml's Q4_0 blocks (K and V).
    PagedQ4_0,
    /// Same inputs over 4-bit pages with ggml's Q4_1 blocks (K and V).
    PagedQ4_1,
    /// Same inputs, K in Q8_0 pages and V in Q4_0 pages (mixed precision).
    PagedQ8KQ4V,
    /// Same inputs over Q4_0 K and V pages, both halves rotated (signed Hadamard).
    PagedQ4_0Rot,
    /// Same inputs, K in Q8_0 pages and V in Q4_0 pages rotated (signed Hadamard).
    PagedQ8KQ4VRot,
    /// 48 tokens (K int8 Q8_0, V f16), prefilled in chunks of 32 with each chunk's queries
    /// attended right after its rows are written, layer by layer.
    Chunked,
    /// The inputs of [`Chunked`](Case::Chunked), all rows written first and all 48 queries
    /// attended in one call per layer: the same digest.
    OnePass,
    /// Prefix reuse (f16 pages): sequence A writes a 120-token prompt and publishes it
    /// ([`commit_prompt`](KvCache::commit_prompt)); sequence B's 150-token prompt shares A's
    /// first 100 tokens, attaches the 96-token hit ([`lookup`](KvCache::lookup),
    /// [`attach`](KvCache::attach)), prefills the rest in [`plan_prefill`] chunks and decodes 8
    /// tokens. Rows and queries are functions of the token prefix, as a model's are. Outputs of
    /// B's positions from 96 on.
    PrefixWarm,
    /// B of [`PrefixWarm`](Case::PrefixWarm) prefilled cold in a fresh cache: the same outputs
    /// and digest.
    PrefixCold,
    /// f32: a 56-token prefill, [`fork`](KvCache::fork), then 40 decode steps on each branch with
    /// different rows and queries, interleaved.
    ForkDiverge,
    /// f32: prefill 100 tokens, [`truncate`](KvCache::truncate) to 70, re-append 60 different
    /// tokens in chunks, decode 6.
    TruncateReappend,
    /// f32: the inputs of [`PagedF32`](Case::PagedF32) under a sliding window of 40 with 4
    /// attention sinks (as a mask; no page is released).
    WindowSinks,
    /// [`WindowSinks`](Case::WindowSinks) releasing the pages no later query sees
    /// ([`slide`](KvCache::slide) after every block): the same digest.
    WindowSlide,
    /// K int8 Q8_0, V f16: the 48-token system prompt of [`snapshot`] prefilled cold, then the 8
    /// tokens after it decoded; their outputs.
    SnapshotCold,
    /// The same 8 decode steps after restoring the system prompt from a snapshot image
    /// ([`snapshot::decode_after_image`]): the same digest. Not in [`CASES`] (it needs the
    /// image); [`run`] refuses it with [`Error::NeedsImage`].
    SnapshotRestored,
    /// f32 pages with K/V rows and queries at and around the subnormal range (the `tiny`
    /// inputs: per KV head, normal keys with values of 2^-124 … 2^-100, subnormal keys and
    /// values, and values of 2^-70 … 2^-40; queries sharp, plain and scaled to 2^-100 …
    /// 2^-60): prefill 40 tokens in chunks of 32, decode 4 more; every output, then the stored
    /// pages' bytes.
    TinyF32,
    /// [`TinyF32`](Case::TinyF32)'s script and inputs over f16 pages.
    TinyF16,
    /// The same over bf16 pages.
    TinyBf16,
    /// The same over int8 pages, groups of 32 (Q8_0).
    TinyQ8_0,
    /// The same over int8 pages, one scale per token and head.
    TinyInt8Head,
    /// The same over FP8 E4M3 tile pages ([`FP8_TILE`]).
    TinyFp8Tile,
    /// The same over Q4_0 pages.
    TinyQ4_0,
    /// The same over Q4_1 pages.
    TinyQ4_1,
    /// The same over f32 pages, K and V rotated (signed Hadamard).
    TinyF32Rot,
    /// The same, K in Q8_0 pages and V in Q4_0 pages rotated (signed Hadamard).
    TinyQ8KQ4VRot,
}

/// Every case, in the order firmware runs and prints them.
pub const CASES: &[Case] = &[
    Case::PagedF32,
    Case::PagedF16,
    Case::PagedBf16,
    Case::PagedQ8_0,
    Case::PagedQ8_0Sharp,
    Case::PagedInt8Head,
    Case::PagedFp8Tile,
    Case::PagedQ4_0,
    Case::PagedQ4_1,
    Case::PagedQ8KQ4V,
    Case::PagedQ4_0Rot,
    Case::PagedQ8KQ4VRot,
    Case::Chunked,
    Case::OnePass,
    Case::PrefixWarm,
    Case::PrefixCold,
    Case::ForkDiverge,
    Case::TruncateReappend,
    Case::WindowSinks,
    Case::WindowSlide,
    Case::SnapshotCold,
    Case::TinyF32,
    Case::TinyF16,
    Case::TinyBf16,
    Case::TinyQ8_0,
    Case::TinyInt8Head,
    Case::TinyFp8Tile,
    Case::TinyQ4_0,
    Case::TinyQ4_1,
    Case::TinyF32Rot,
    Case::TinyQ8KQ4VRot,
];

/// Cases at the end of [`CASES`] whose inputs reach f32's subnormal range.
const TINY_COUNT: usize = 10;

/// The cases whose inputs reach f32's subnormal range: the last ten of [`CASES`].
pub const TINY_CASES: &[Case] = CASES.split_at(CASES.len() - TINY_COUNT).1;

/// The FP8 tile format of [`Case::PagedFp8Tile`].
pub const FP8_TILE: ElementFormat = ElementFormat::Fp8Tile {
    dv: 48,
    tile: 16,
    bf16: false,
};

/// Sinks and window of [`Case::WindowSinks`].
pub const WINDOW: (u32, u32) = (4, 40);

/// Bytes of a [`Digest`]'s fixed-size name.
pub const NAME_LEN: usize = 24;

// Every name fits a digest's name field.
const _: () = {
    let mut i = 0;
    while i < CASES.len() {
        assert!(CASES[i].name().len() <= NAME_LEN);
        i += 1;
    }
};

impl Case {
    /// The case's stable name (lowercase ASCII, at most [`NAME_LEN`] bytes).
    pub const fn name(self) -> &'static str {
        match self {
            Case::PagedF32 => "paged_f32",
            Case::PagedF16 => "paged_f16",
            Case::PagedBf16 => "paged_bf16",
            Case::PagedQ8_0 => "paged_q8_0",
            Case::PagedQ8_0Sharp => "paged_q8_0_sharp",
            Case::PagedInt8Head => "paged_int8_head",
            Case::PagedFp8Tile => "paged_fp8_tile",
            Case::PagedQ4_0 => "paged_q4_0",
            Case::PagedQ4_1 => "paged_q4_1",
            Case::PagedQ8KQ4V => "paged_q8_0_k_q4_0_v",
            Case::PagedQ4_0Rot => "paged_q4_0_rot",
            Case::PagedQ8KQ4VRot => "paged_q8_0_k_q4_0_v_rot",
            Case::Chunked => "prefill_chunked",
            Case::OnePass => "prefill_one_pass",
            Case::PrefixWarm => "prefix_warm",
            Case::PrefixCold => "prefix_cold",
            Case::ForkDiverge => "fork_diverge",
            Case::TruncateReappend => "truncate_reappend",
            Case::WindowSinks => "window_sinks",
            Case::WindowSlide => "window_slide",
            Case::SnapshotCold => "snapshot_cold",
            Case::SnapshotRestored => "snapshot_restored",
            Case::TinyF32 => "tiny_f32",
            Case::TinyF16 => "tiny_f16",
            Case::TinyBf16 => "tiny_bf16",
            Case::TinyQ8_0 => "tiny_q8_0",
            Case::TinyInt8Head => "tiny_int8_head",
            Case::TinyFp8Tile => "tiny_fp8_tile",
            Case::TinyQ4_0 => "tiny_q4_0",
            Case::TinyQ4_1 => "tiny_q4_1",
            Case::TinyF32Rot => "tiny_f32_rot",
            Case::TinyQ8KQ4VRot => "tiny_q8_0_k_q4_0_v_rot",
        }
    }

    /// The case with this name.
    pub fn from_name(name: &str) -> Option<Case> {
        CASES.iter().copied().find(|c| c.name() == name)
    }

    /// The K and V page formats.
    pub const fn formats(self) -> (ElementFormat, ElementFormat) {
        let f = match self {
            Case::PagedF16 | Case::PrefixWarm | Case::PrefixCold | Case::TinyF16 => {
                ElementFormat::F16
            }
            Case::PagedBf16 | Case::TinyBf16 => ElementFormat::Bf16,
            Case::PagedQ8_0 | Case::PagedQ8_0Sharp | Case::TinyQ8_0 => ElementFormat::Q8_0,
            Case::PagedInt8Head | Case::TinyInt8Head => ElementFormat::Int8 {
                group: SHAPE.head_dim,
            },
            Case::PagedFp8Tile | Case::TinyFp8Tile => FP8_TILE,
            Case::PagedQ4_0 | Case::PagedQ4_0Rot | Case::TinyQ4_0 => ElementFormat::Q4_0,
            Case::PagedQ4_1 | Case::TinyQ4_1 => ElementFormat::Q4_1,
            Case::PagedQ8KQ4V | Case::PagedQ8KQ4VRot | Case::TinyQ8KQ4VRot => {
                return (ElementFormat::Q8_0, ElementFormat::Q4_0);
            }
            Case::Chunked | Case::OnePass | Case::SnapshotCold | Case::SnapshotRestored => {
                return (ElementFormat::Q8_0, ElementFormat::F16);
            }
            _ => ElementFormat::F32,
        };
        (f, f)
    }

    /// The case's K and V page formats (and rotations) in words, e.g. `q8_0 K, f16 V`.
    pub const fn formats_label(self) -> &'static str {
        match self {
            Case::PagedF16 | Case::PrefixWarm | Case::PrefixCold => "f16",
            Case::PagedBf16 => "bf16",
            Case::PagedQ8_0 | Case::PagedQ8_0Sharp => "q8_0",
            Case::PagedInt8Head => "int8, a scale per head",
            Case::PagedFp8Tile => "fp8 tiles",
            Case::PagedQ4_0 => "q4_0",
            Case::PagedQ4_1 => "q4_1",
            Case::PagedQ8KQ4V => "q8_0 K, q4_0 V",
            Case::PagedQ4_0Rot => "q4_0 rotated",
            Case::PagedQ8KQ4VRot => "q8_0 K, q4_0 V rotated",
            Case::Chunked | Case::OnePass | Case::SnapshotCold | Case::SnapshotRestored => {
                "q8_0 K, f16 V"
            }
            Case::TinyF32 => "f32, subnormal inputs",
            Case::TinyF16 => "f16, subnormal inputs",
            Case::TinyBf16 => "bf16, subnormal inputs",
            Case::TinyQ8_0 => "q8_0, subnormal inputs",
            Case::TinyInt8Head => "int8 a scale per head, subnormal inputs",
            Case::TinyFp8Tile => "fp8 tiles, subnormal inputs",
            Case::TinyQ4_0 => "q4_0, subnormal inputs",
            Case::TinyQ4_1 => "q4_1, subnormal inputs",
            Case::TinyF32Rot => "f32 rotated, subnormal inputs",
            Case::TinyQ8KQ4VRot => "q8_0 K, q4_0 V rotated, subnormal inputs",
            _ => "f32",
        }
    }

    /// The K and V rotations.
    pub const fn rotations(self) -> (Rotation, Rotation) {
        match self {
            Case::PagedQ4_0Rot => (Rotation::SignedHadamard, Rotation::SignedHadamard),
            Case::PagedQ8KQ4VRot | Case::TinyQ8KQ4VRot => {
                (Rotation::None, Rotation::SignedHadamard)
            }
            Case::TinyF32Rot => (Rotation::SignedHadamard, Rotation::SignedHadamard),
            _ => (Rotation::None, Rotation::None),
        }
    }

    /// The cache configuration the case runs on.
    pub const fn config(self) -> CacheConfig {
        let (k, v) = self.formats();
        let (kr, vr) = self.rotations();
        base(k, v).with_rotations(kr, vr)
    }

    /// The attention parameters of every call of the case.
    pub fn params(self) -> AttentionParams {
        let p = AttentionParams::new(SHAPE, Q_HEADS);
        match self {
            Case::WindowSinks | Case::WindowSlide => p.with_window(WINDOW.0, WINDOW.1),
            _ => p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`TINY_CASES`] is exactly the `tiny_*` cases.
    #[test]
    fn tiny_cases_are_the_tiny_ones() {
        for &case in CASES {
            assert_eq!(
                TINY_CASES.contains(&case),
                case.name().starts_with("tiny_"),
                "{}",
                case.name()
            );
        }
    }
}
