//! Tells the matmul kernels (`src/arch/`) which instructions the target has, as the core crate's
//! build script does (Cargo's `cfg(target_feature)` does not report Arm's Helium or DSP
//! extension on stable Rust): `edgekv_llm_mve` for Helium (a Cortex-M55 or M85 target CPU, or
//! `+mve`, on ARMv8.1-M), `edgekv_llm_dsp` for the DSP extension without Helium (ARMv7E-M, and
//! ARMv8-M Mainline built for a Cortex-M33 / M35P or with `+dsp`, as the core crate decides it),
//! hard float only (its kernels combine the scales on the FPU), `edgekv_llm_x86` for x86-64 (AVX2 detected at run time), `edgekv_llm_aarch64` for AArch64
//! (NEON; the dot-product extension detected at run time). None of them under
//! Miri (it runs the portable matmuls) or with the feature `portable`.

use std::env;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(edgekv_llm_mve)");
    println!("cargo::rustc-check-cfg=cfg(edgekv_llm_dsp)");
    println!("cargo::rustc-check-cfg=cfg(edgekv_llm_x86)");
    println!("cargo::rustc-check-cfg=cfg(edgekv_llm_aarch64)");
    println!("cargo::rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    if env::var_os("CARGO_FEATURE_PORTABLE").is_some() {
        return;
    }
    // Miri runs the portable code (`cfg(miri)` reaches build scripts as `CARGO_CFG_MIRI`).
    let miri = env::var_os("CARGO_CFG_MIRI").is_some();
    if env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") && !miri {
        println!("cargo::rustc-cfg=edgekv_llm_x86");
    }
    if env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("aarch64") && !miri {
        println!("cargo::rustc-cfg=edgekv_llm_aarch64");
    }
    let target = env::var("TARGET").unwrap_or_default();
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let flags: Vec<&str> = flags.split('\x1f').collect();
    // `-C target-cpu=X` arrives as one flag or as `-C` then `target-cpu=X`.
    let cpu = flags
        .iter()
        .find_map(|f| f.trim_start_matches("-C").strip_prefix("target-cpu="))
        .unwrap_or("");
    let features: Vec<&str> = flags
        .iter()
        .filter_map(|f| f.trim_start_matches("-C").strip_prefix("target-feature="))
        .flat_map(|f| f.split(','))
        .collect();
    let mve = matches!(cpu, "cortex-m55" | "cortex-m85")
        || features.iter().any(|f| f.starts_with("+mve"));
    // The kernels also use the FPU's scalar half-precision loads and conversions (hard float).
    let hard_float = target.ends_with("eabihf");
    if mve && hard_float && target.starts_with("thumbv8m.main-") && !features.contains(&"-mve") {
        println!("cargo::rustc-cfg=edgekv_llm_mve");
    }
    // The DSP kernels (`SMLAD`, `SXTB16`) where there is no Helium (on the M55 and M85 the
    // Helium kernels run), and the FPU's scalar f16 conversions and arithmetic (hard float).
    let dsp_cpu = matches!(cpu, "cortex-m33" | "cortex-m35p");
    let dsp = target.starts_with("thumbv7em-")
        || (target.starts_with("thumbv8m.main-") && (dsp_cpu || features.contains(&"+dsp")));
    if dsp && !mve && hard_float && !features.contains(&"-dsp") {
        println!("cargo::rustc-cfg=edgekv_llm_dsp");
    }
}
