//! Quantization of rows on their own: int8 groups (ggml Q8_0 math), ggml Q4_0 / Q4_1 blocks and
//! FP8 E4M3 tiles (SGLang layout). The codecs live with their page formats (`format::int8`, `format::fp8`); this module
//! keeps their public paths.

pub use crate::format::fp8::{
    dequantize_fp8_tile, e4m3_from_f32, e4m3_to_f32, fp8_tile_row_bytes, quantize_fp8_tile,
};
pub use crate::format::int4::{Q4_BLOCK, Q4Kind, dequantize_q4, quantize_q4};
pub use crate::format::int8::{dequantize_q8, quantize_q8};
