//! Puts memory.x on the linker's search path, and writes the snapshot image the firmware
//! restores: the parity system prompt's KV, computed here on the host exactly as a user's host
//! tool would (`edgekv snapshot`), then linked into flash with `include_bytes!`.
use std::mem::MaybeUninit;
use std::{env, fs, path::PathBuf};

use edgekv_parity::{Arenas, DATA_BYTES, META_BYTES, WORK_F32, snapshot};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    fs::write(out.join("memory.x"), include_bytes!("memory.x")).expect("memory.x");
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");

    let mut data = vec![MaybeUninit::uninit(); DATA_BYTES];
    let mut meta = vec![MaybeUninit::uninit(); META_BYTES];
    let mut work = vec![0f32; WORK_F32];
    let mut arenas = Arenas {
        data: &mut data,
        meta: &mut meta,
        work: &mut work,
    };
    let mut mem = vec![0u8; snapshot::IMAGE_MAX];
    let image = snapshot::write_image_into(&mut arenas, &mut mem).expect("system prompt image");
    fs::write(out.join("system_prompt.ekvs"), image).expect("image");
}
