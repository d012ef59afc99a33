//! Every parity case's digest and every model shape's decode step over 2,048 keys, one line
//! each, as the boards print them: the same lines on every machine prove the same bits. The
//! listing is committed (`parity/digests.txt`); the host's tests and `cargo test-all`'s aarch64
//! stage (this example under `qemu-aarch64`) compare with it.
//! `cargo run --release -p edgekv-parity --example digests`.

use std::mem::MaybeUninit;

use edgekv_parity::{
    Arenas, DATA_BYTES, META_BYTES, STEP_SHAPES_ARENA_BYTES, STEP_SHAPES_WORK_F32, WORK_F32,
    digest_listing,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut data = vec![MaybeUninit::<u8>::uninit(); DATA_BYTES];
    let mut meta = vec![MaybeUninit::<u8>::uninit(); META_BYTES];
    let mut work = vec![0f32; WORK_F32];
    let mut arenas = Arenas {
        data: &mut data,
        meta: &mut meta,
        work: &mut work,
    };
    let mut step_arena = vec![MaybeUninit::<u8>::uninit(); STEP_SHAPES_ARENA_BYTES];
    let mut step_work = vec![0f32; STEP_SHAPES_WORK_F32];
    digest_listing(&mut arenas, &mut step_arena, &mut step_work, &mut |l| {
        println!("{l}")
    })
    .map_err(|e| format!("{e:?}"))?;
    Ok(())
}
