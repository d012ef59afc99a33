//! The digest listing: every parity case's digest and every model shape's decode step, one line
//! each, as the boards print them. Committed as `parity/digests.txt`: the host's tests and the
//! aarch64 build under emulation must print exactly that file (same lines, same bits).

use core::fmt;
use core::mem::MaybeUninit;

use crate::{
    Arenas, CASES, Error, STEP_KEYS, STEP_SHAPES, TINY_CASES, decode_step_of, run, stored_pages,
};

/// The committed listing (`parity/digests.txt`).
pub const DIGESTS: &str = include_str!("../digests.txt");

/// Passes each line of the listing (without its newline) to `line`: the cases in [`CASES`]
/// order run in `arenas`, the stored pages of each of [`TINY_CASES`](crate::TINY_CASES) ([`stored_pages`]), then the decode step of every shape in [`STEP_SHAPES`] over
/// [`STEP_KEYS`] keys in `step_arena` and `step_work` (sized
/// [`STEP_SHAPES_ARENA_BYTES`](crate::STEP_SHAPES_ARENA_BYTES) and
/// [`STEP_SHAPES_WORK_F32`](crate::STEP_SHAPES_WORK_F32)). The first error stops it.
pub fn digest_listing(
    arenas: &mut Arenas<'_>,
    step_arena: &mut [MaybeUninit<u8>],
    step_work: &mut [f32],
    line: &mut dyn FnMut(fmt::Arguments<'_>),
) -> Result<(), Error> {
    for &case in CASES {
        let digest = run(case, arenas, &mut |_| {})?;
        line(format_args!("{digest}"));
    }
    for &case in TINY_CASES {
        let crc = stored_pages(case, arenas)?;
        line(format_args!("pages {} crc32 {crc:08x}", case.name()));
    }
    for shape in &STEP_SHAPES {
        let step = decode_step_of(shape, step_arena, step_work, &mut || 0)?;
        line(format_args!(
            "decode_step {} shape {},{},{} keys {STEP_KEYS} crc32 {:08x}",
            shape.model, shape.q_heads, shape.kv_heads, shape.head_dim, step.crc32
        ));
    }
    Ok(())
}
