//! Every parity case's digest and every model shape's decode step over 2,048 keys, one line
//! each, as the boards print them: the same lines on every machine prove the same bits
//! (`cargo test-all`'s aarch64 stage runs it natively and under `qemu-aarch64` and compares).
//! `cargo run --release -p edgekv-parity --example digests`.

use std::mem::MaybeUninit;

use edgekv_parity::{
    Arenas, CASES, DATA_BYTES, META_BYTES, STEP_KEYS, STEP_SHAPES, STEP_SHAPES_ARENA_BYTES,
    STEP_SHAPES_WORK_F32, WORK_F32, decode_step_of, run,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut data = vec![MaybeUninit::<u8>::uninit(); DATA_BYTES];
    let mut meta = vec![MaybeUninit::<u8>::uninit(); META_BYTES];
    let mut work = vec![0f32; WORK_F32];
    for &case in CASES {
        let mut arenas = Arenas {
            data: &mut data,
            meta: &mut meta,
            work: &mut work,
        };
        let digest =
            run(case, &mut arenas, &mut |_| {}).map_err(|e| format!("{}: {e}", case.name()))?;
        println!("{digest}");
    }
    let mut arena = vec![MaybeUninit::<u8>::uninit(); STEP_SHAPES_ARENA_BYTES];
    let mut work = vec![0f32; STEP_SHAPES_WORK_F32];
    for shape in &STEP_SHAPES {
        let step = decode_step_of(shape, &mut arena, &mut work, &mut || 0)
            .map_err(|e| format!("{}: {e:?}", shape.model))?;
        println!(
            "decode_step {} shape {},{},{} keys {STEP_KEYS} crc32 {:08x}",
            shape.model, shape.q_heads, shape.kv_heads, shape.head_dim, step.crc32
        );
    }
    Ok(())
}
