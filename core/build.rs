//! Tells the kernels which Arm instructions the target has (Cargo's `cfg(target_feature)` does
//! not report Arm's `dsp` or FP16 conversion on stable Rust): `edgekv_arm_dsp` for the DSP
//! extension (ARMv7E-M, and ARMv8-M mainline built for a core that has it but not Helium),
//! `edgekv_arm_mve` for Helium (a Cortex-M55 or M85 target CPU, or `+mve`), `edgekv_arm_f16cvt`
//! for an FPU with half-precision conversion (the hard-float Cortex-M targets). And which ISA
//! module `arch` dispatches to: `edgekv_x86_kernels` (x86-64 outside Miri: AVX2 and F16C
//! detected at run time), `edgekv_arm_kernels` (Arm with the DSP extension or f16 conversion),
//! neither for `arch/none.rs`. The feature `portable` turns them all off.

use std::env;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(edgekv_arm_dsp)");
    println!("cargo::rustc-check-cfg=cfg(edgekv_arm_f16cvt)");
    println!("cargo::rustc-check-cfg=cfg(edgekv_arm_mve)");
    println!("cargo::rustc-check-cfg=cfg(edgekv_x86_kernels)");
    println!("cargo::rustc-check-cfg=cfg(edgekv_arm_kernels)");
    println!("cargo::rustc-check-cfg=cfg(edgekv_aarch64_kernels)");
    println!("cargo::rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    if env::var_os("CARGO_FEATURE_PORTABLE").is_some() {
        return;
    }
    // Miri runs the portable code (`cfg(miri)` reaches build scripts as `CARGO_CFG_MIRI`).
    let miri = env::var_os("CARGO_CFG_MIRI").is_some();
    if env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") && !miri {
        println!("cargo::rustc-cfg=edgekv_x86_kernels");
    }
    if env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("aarch64") && !miri {
        println!("cargo::rustc-cfg=edgekv_aarch64_kernels");
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
    // Cores with Helium (M55, M85) get the Helium scores, not the DSP kernels, which cost more
    // there than LLVM's vectorization of the portable ones (Cortex-M55, one decode step at 2,048
    // keys: 7.7 M instructions portable, 13.9 M with the DSP kernels).
    let mve = matches!(cpu, "cortex-m55" | "cortex-m85")
        || features.iter().any(|f| f.starts_with("+mve"));
    let dsp_cpu = matches!(cpu, "cortex-m33" | "cortex-m35p");
    let dsp = target.starts_with("thumbv7em-")
        || (target.starts_with("thumbv8m.main-") && (dsp_cpu || features.contains(&"+dsp")));
    if mve && target.starts_with("thumbv8m.main-") && !features.contains(&"-mve") {
        println!("cargo::rustc-cfg=edgekv_arm_mve");
    }
    let dsp = dsp && !mve && !features.contains(&"-dsp");
    if dsp {
        println!("cargo::rustc-cfg=edgekv_arm_dsp");
    }
    let hard_float = target.starts_with("thumbv") && target.ends_with("eabihf");
    let f16cvt = hard_float && !target.starts_with("thumbv6m");
    if f16cvt {
        println!("cargo::rustc-cfg=edgekv_arm_f16cvt");
    }
    if dsp || f16cvt {
        println!("cargo::rustc-cfg=edgekv_arm_kernels");
    }
}
