use super::*;
use crate::format::kernels::Reference;

/// The reference codec alone.
fn quantize_q4<T: Element>(kind: Q4Kind, x: &[T], out: &mut [u8]) -> Result<()> {
    quantize_q4_with::<Reference, T>(kind, x, out)
}

#[test]
fn block_sizes_are_ggmls() {
    assert_eq!(Q4Kind::Q4_0.block_bytes(), 18);
    assert_eq!(Q4Kind::Q4_1.block_bytes(), 20);
    assert_eq!(Q4Kind::Q4_0.bytes_for(64), Some(36));
    assert_eq!(Q4Kind::Q4_1.bytes_for(33), None);
}

#[test]
fn q4_0_block_codes_scale_and_nibble_order() {
    // x[j] = j − 16: max |x| is −16 (first), d = 2, codes x/2 + 8.5 truncated.
    let x: [f32; 32] = core::array::from_fn(|j| j as f32 - 16.0);
    let mut b = [0u8; 18];
    quantize_q4(Q4Kind::Q4_0, &x, &mut b).unwrap();
    assert_eq!(f16::from_le_bytes([b[0], b[1]]).to_f32(), 2.0);
    // value 0 (−16) → 0, value 16 (0) → 8: byte 0 = 0x80.
    assert_eq!(b[2], 0x80);
    // value 15 (−1) → trunc(8.0) = 8, value 31 (15) → trunc(16.0) = 16 → 15: byte 15 = 0xF8.
    assert_eq!(b[17], 0xF8);
    let mut y = [0f32; 32];
    dequantize_q4(Q4Kind::Q4_0, &b, &mut y).unwrap();
    assert_eq!(y[0], -16.0);
    assert_eq!(y[16], 0.0);
    assert_eq!(y[31], 14.0);
}

#[test]
fn q4_1_block_keeps_min_and_range() {
    let x: [f32; 32] = core::array::from_fn(|j| 1.0 + j as f32 * 0.5);
    let mut b = [0u8; 20];
    quantize_q4(Q4Kind::Q4_1, &x, &mut b).unwrap();
    let mut y = [0f32; 32];
    dequantize_q4(Q4Kind::Q4_1, &b, &mut y).unwrap();
    assert_eq!(y[0], 1.0);
    assert_eq!(f16::from_le_bytes([b[2], b[3]]).to_f32(), 1.0);
    let step = (16.5f32 - 1.0) / 15.0;
    for (a, e) in y.iter().zip(x) {
        assert!((a - e).abs() <= step / 2.0 + 1e-2, "{a} vs {e}");
    }
}

#[test]
fn zero_and_non_finite_blocks_do_not_panic() {
    let mut b = [0u8; 20];
    quantize_q4(Q4Kind::Q4_1, &[0.0; 32], &mut b).unwrap();
    let mut y = [1f32; 32];
    dequantize_q4(Q4Kind::Q4_1, &b, &mut y).unwrap();
    assert_eq!(y, [0.0; 32]);
    let mut x = [0.5f32; 32];
    x[3] = f32::NAN;
    x[7] = f32::INFINITY;
    x[9] = f32::NEG_INFINITY;
    for kind in [Q4Kind::Q4_0, Q4Kind::Q4_1] {
        let mut b = vec![0u8; kind.block_bytes()];
        quantize_q4(kind, &x, &mut b).unwrap();
        let mut again = vec![0u8; kind.block_bytes()];
        quantize_q4(kind, &x, &mut again).unwrap();
        assert_eq!(
            b, again,
            "{kind:?}: codes of non-finite input are deterministic"
        );
        let mut y = [0f32; 32];
        dequantize_q4(kind, &b, &mut y).unwrap();
        // NaN scaled values take code 0 (a saturating cast), never a random nibble.
        let code3 = b[kind.block_bytes() - 16 + 3] & 0x0F;
        assert_eq!(code3, 0, "{kind:?}");
    }
}

#[test]
fn wrong_lengths_are_refused_and_write_nothing() {
    let mut b = [0xAAu8; 36];
    assert_eq!(
        quantize_q4(Q4Kind::Q4_0, &[1.0; 63], &mut b[..35]),
        Err(Error::LengthMismatch)
    );
    assert_eq!(
        quantize_q4(Q4Kind::Q4_0, &[1.0; 64], &mut b[..35]),
        Err(Error::LengthMismatch)
    );
    assert_eq!(b, [0xAA; 36]);
    let mut y = [7f32; 64];
    assert_eq!(
        dequantize_q4(Q4Kind::Q4_1, &b, &mut y),
        Err(Error::LengthMismatch)
    );
    assert_eq!(y, [7.0; 64]);
}
